#!/usr/bin/env bash
# Session 33 (issue 18), command 2 (code 4afa51a: both phases held, each measured ahead takes its scale from it): the zoo's resnet50 and vit rows inductor and
# offload:auto over 8 steps, with a paced phase's kernels timed with the host ahead
# (the "kernels" call: replanning.HOLD_FACTOR, Measured.ahead_compute_ms).
#   OUT=dir bash benchmarks/results/2026-11-27_s33_cmd2.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/gpu.txt
python -c "import torch; print(torch.__version__)" >> $OUT/gpu.txt
timeout 330 python benchmarks/zoo.py --models resnet50 --strategies inductor,offload:auto --steps 8 --warmup 1 \
  --timeout 170 --budget-seconds 320 --caches warm --out $OUT/zoo_a > $OUT/zoo_resnet50.log 2>&1
timeout 200 python benchmarks/zoo.py --models vit --strategies inductor,offload:auto --steps 8 --warmup 1 \
  --timeout 120 --budget-seconds 190 --caches warm --out $OUT/zoo_b > $OUT/zoo_vit.log 2>&1
grep -h -E 'measured graph|auto" measured|going back|keeping the faster|planning again|graph [0-9]+ runs again' \
  $OUT/zoo_a/*/*.log $OUT/zoo_b/*/*.log 2>/dev/null | cut -c1-1200 > $OUT/replans.txt
python - <<'PY' > $OUT/synced.txt 2>&1
import glob, json, os
for f in sorted(glob.glob(os.environ["OUT"] + "/zoo_*/*/compare.json")):
    for r in json.load(open(f))["rows"]:
        e = r["extra"]
        print(f.split("/")[-2], r["strategy"], r["step_ms"], e.get("synced_step_ms"), e.get("step_times_ms"))
PY
tar czf $OUT/zoo.tgz -C $OUT zoo_a zoo_b && rm -rf $OUT/zoo_a $OUT/zoo_b
cut -c1-400 $OUT/replans.txt; tail -7 $OUT/zoo_resnet50.log; tail -7 $OUT/zoo_vit.log; cat $OUT/synced.txt $OUT/gpu.txt
