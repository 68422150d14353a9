#!/usr/bin/env bash
# Session 32 (issue 18), command 7: the zoo's resnet50 and gpt rows inductor and offload:auto,
# a row's step time now of its steps run back to back (compare.run.back_to_back), the
# synchronised steps' median beside it (synced_step_ms).
#   OUT=dir bash benchmarks/results/2026-11-27_s32_cmd7.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/gpu.txt
python -c "import torch; print(torch.__version__)" >> $OUT/gpu.txt
timeout 300 python benchmarks/zoo.py --models resnet50 --strategies inductor,offload:auto --steps 3 --warmup 1 \
  --timeout 160 --budget-seconds 290 --caches warm --out $OUT/zoo_a > $OUT/zoo_resnet50.log 2>&1
timeout 220 python benchmarks/zoo.py --models gpt --strategies inductor,offload:auto --steps 3 --warmup 1 \
  --timeout 150 --budget-seconds 210 --caches warm --out $OUT/zoo_b > $OUT/zoo_gpt.log 2>&1
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
cut -c1-300 $OUT/replans.txt; tail -7 $OUT/zoo_resnet50.log; tail -7 $OUT/zoo_gpt.log; cat $OUT/synced.txt $OUT/gpu.txt
