#!/usr/bin/env bash
# Session 33 (issue 18), command 3: kernel launches per phase of ResNet-50 under Inductor,
# the backend with nothing moved and at budget 0.5 (2026-11-27_s33_kernel_probe.py), then
# the zoo's gpt rows inductor and offload:auto over 8 steps.
#   OUT=dir bash benchmarks/results/2026-11-27_s33_cmd3.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/gpu.txt
python -c "import torch; print(torch.__version__)" >> $OUT/gpu.txt
timeout 250 python benchmarks/results/2026-11-27_s33_kernel_probe.py resnet50 0.5 > $OUT/kernel_probe.log 2>&1
timeout 260 python benchmarks/zoo.py --models gpt --strategies inductor,offload:auto --steps 8 --warmup 1 \
  --timeout 160 --budget-seconds 250 --caches warm --out $OUT/zoo_a > $OUT/zoo_gpt.log 2>&1
grep -h -E 'measured graph|auto" measured|going back|keeping the faster|planning again|graph [0-9]+ runs again' \
  $OUT/zoo_a/*/*.log 2>/dev/null | cut -c1-1200 > $OUT/replans.txt
python - <<'PY' > $OUT/synced.txt 2>&1
import glob, json, os
for f in sorted(glob.glob(os.environ["OUT"] + "/zoo_*/*/compare.json")):
    for r in json.load(open(f))["rows"]:
        e = r["extra"]
        print(f.split("/")[-2], r["strategy"], r["step_ms"], e.get("synced_step_ms"), e.get("step_times_ms"))
PY
tar czf $OUT/zoo.tgz -C $OUT zoo_a && rm -rf $OUT/zoo_a
grep -E '^(inductor|none|budget)' $OUT/kernel_probe.log || tail -5 $OUT/kernel_probe.log
cut -c1-300 $OUT/replans.txt; tail -7 $OUT/zoo_gpt.log; cat $OUT/synced.txt $OUT/gpu.txt
