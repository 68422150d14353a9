#!/usr/bin/env bash
# Session 32 (issue 18), command 10: the zoo's vit and llama rows inductor and offload:auto over 8 steps (command 9: 3 synchronised steps of ViT-B/16 included one at 45 ms),
# a row's step time now of its steps run back to back (compare.run.back_to_back), the
# synchronised steps' median beside it (synced_step_ms).
#   OUT=dir bash benchmarks/results/2026-11-27_s32_cmd10.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/gpu.txt
python -c "import torch; print(torch.__version__)" >> $OUT/gpu.txt
timeout 190 python benchmarks/zoo.py --models vit --strategies inductor,offload:auto --steps 8 --warmup 1 \
  --timeout 110 --budget-seconds 180 --caches warm --out $OUT/zoo_a > $OUT/zoo_vit.log 2>&1
timeout 260 python benchmarks/zoo.py --models llama --strategies inductor,offload:auto --steps 8 --warmup 1 \
  --timeout 140 --budget-seconds 250 --caches warm --out $OUT/zoo_b > $OUT/zoo_llama.log 2>&1
grep -h -E 'measured graph|auto" measured|going back|keeping the faster|planning again|graph [0-9]+ runs again' \
  $OUT/zoo_a/*/*.log $OUT/zoo_b/*/*.log 2>/dev/null | cut -c1-900 > $OUT/replans.txt
python - <<'PY' > $OUT/synced.txt 2>&1
import glob, json, os
for f in sorted(glob.glob(os.environ["OUT"] + "/zoo_*/*/compare.json")):
    for r in json.load(open(f))["rows"]:
        e = r["extra"]
        print(f.split("/")[-2], r["strategy"], r["step_ms"], e.get("synced_step_ms"), e.get("step_times_ms"))
PY
tar czf $OUT/zoo.tgz -C $OUT zoo_a zoo_b && rm -rf $OUT/zoo_a $OUT/zoo_b
cut -c1-300 $OUT/replans.txt; tail -7 $OUT/zoo_vit.log; tail -7 $OUT/zoo_llama.log; cat $OUT/synced.txt $OUT/gpu.txt
