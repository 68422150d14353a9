#!/usr/bin/env bash
# Session 41 (issue 18), command 1: the GPU suite at the session's code ("auto"'s first
# plan moves nothing where it fits, its measurement the step max_overhead is held
# against), then ResNet-50 interleaved (inductor, "auto").
#   OUT=dir bash benchmarks/results/2026-11-28_s41_cmd1.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader > "$OUT/gpu.txt"
python -c "import torch; print(torch.__version__)" >> "$OUT/gpu.txt"
timeout 220 python -m pytest -q -m gpu -n 6 --dist load -rfEx -p no:cacheprovider --durations=5 tests \
  > "$OUT/gpu_suite.log" 2>&1
echo "gpu suite rc $?" >> "$OUT/gpu.txt"
timeout 340 python benchmarks/interleaved.py --model benchmarks/zoo_models.py:resnet50 --dtype float32 \
  --strategies inductor,offload:auto --rounds 10 --steps 8 \
  --json "$OUT/resnet50.json" > "$OUT/resnet50.log" 2>&1
echo "resnet50 rc $?" >> "$OUT/gpu.txt"
grep -h -E 'nothing moved, measured|offload: measured|auto" measured|going back|keeping|planning again|planning once|runs again|still differs|offloaded' \
  "$OUT/resnet50.log" | cut -c1-420
tail -n 6 "$OUT/resnet50.log" | head -n 5
tail -n 3 "$OUT/gpu_suite.log"
cat "$OUT/gpu.txt"
