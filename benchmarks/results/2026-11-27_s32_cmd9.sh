#!/usr/bin/env bash
# Session 32 (issue 18), command 9: the example GPT (h100 preset) under "auto" step by step
# (2026-11-27_s32_host_probe.py, with the host pool's allocations and releases per step):
# command 7 timed its plan at 91.1 ms in the backend and 96.4 ms back to back in the zoo;
# which steps, and is it the GPU's time or the host's? Then the zoo's ViT-B/16 rows
# inductor and offload:auto with back-to-back step times.
#   OUT=dir bash benchmarks/results/2026-11-27_s32_cmd9.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/gpu.txt
python -c "import torch; print(torch.__version__)" >> $OUT/gpu.txt
timeout 150 python benchmarks/results/2026-11-27_s32_host_probe.py gpt '{"memory_budget": "auto"}' 26 \
  > $OUT/gpt_auto.log 2>&1
timeout 190 python benchmarks/zoo.py --models vit --strategies inductor,offload:auto --steps 3 --warmup 1 \
  --timeout 110 --budget-seconds 180 --caches warm --out $OUT/zoo_a > $OUT/zoo_vit.log 2>&1
python - <<'PY' > $OUT/synced.txt 2>&1
import glob, json, os
for f in sorted(glob.glob(os.environ["OUT"] + "/zoo_*/*/compare.json")):
    for r in json.load(open(f))["rows"]:
        e = r["extra"]
        print(f.split("/")[-2], r["strategy"], r["step_ms"], e.get("synced_step_ms"), e.get("step_times_ms"))
PY
tar czf $OUT/zoo.tgz -C $OUT zoo_a && rm -rf $OUT/zoo_a
grep -E "^step|measured graph|going back|released|Error" $OUT/gpt_auto.log | cut -c1-165
tail -6 $OUT/zoo_vit.log; cat $OUT/synced.txt $OUT/gpu.txt
