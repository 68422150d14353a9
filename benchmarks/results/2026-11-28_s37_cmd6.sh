#!/usr/bin/env bash
# Session 37 (issue 18), command 6: the GPU suite at the session's final code (the eager
# inner compiler's step peak without a buffer pool, the mended timed-call test).
#   OUT=dir bash benchmarks/results/2026-11-28_s37_cmd6.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader > "$OUT/gpu.txt"
python -c "import torch; print(torch.__version__)" >> "$OUT/gpu.txt"
timeout 200 python -m pytest -q -m gpu -n 6 --dist load -rfEx -p no:cacheprovider --durations=5 tests \
  > "$OUT/gpu_suite.log" 2>&1
echo "gpu suite rc $?" >> "$OUT/gpu.txt"
tail -n 12 "$OUT/gpu_suite.log"
cat "$OUT/gpu.txt"
