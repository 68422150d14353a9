#!/usr/bin/env bash
# Session 42 (issue 18), command 1: the GPU suite at session 41's head (its new test,
# test_auto_measures_nothing_moved_first_and_judges_its_replan_against_it, not run
# before), then ViT-B/16 (Inductor, "auto") interleaved with the full log kept, to read
# what the host of an offloading re-plan costs against its prediction.
#   OUT=dir bash benchmarks/results/2026-11-28_s42_cmd1.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader > "$OUT/gpu.txt"
python -c "import torch; print(torch.__version__)" >> "$OUT/gpu.txt"
timeout 200 python -m pytest -q -m gpu -n 6 --dist load -rfEx -p no:cacheprovider --durations=5 tests \
  > "$OUT/gpu_suite.log" 2>&1
echo "gpu suite rc $?" >> "$OUT/gpu.txt"
timeout 200 python benchmarks/interleaved.py --model benchmarks/zoo_models.py:vit --dtype float32 \
  --strategies inductor,offload:auto --rounds 6 --steps 8 --json "$OUT/vit.json" > "$OUT/vit.log" 2>&1
echo "vit rc $?" >> "$OUT/gpu.txt"
grep -h -E 'measured|planning again|planning once|going back|keeping|runs again|judged' "$OUT/vit.log" | cut -c1-400
tail -n 5 "$OUT/vit.log"
grep -E "passed|failed" "$OUT/gpu_suite.log" | tail -n 3
cat "$OUT/gpu.txt"
