#!/usr/bin/env bash
# Session 37 (issue 18), command 2: the GPU suite, which command 1 cut at 200 s with one of
# its 36 tests still running: verbose, with each test's duration, under a longer cap.
#   OUT=dir bash benchmarks/results/2026-11-28_s37_cmd2.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader > "$OUT/gpu.txt"
python -c "import torch; print(torch.__version__)" >> "$OUT/gpu.txt"
timeout 480 python -m pytest -v -m gpu -n 6 --dist load -rfEx -p no:cacheprovider --durations=12 tests \
  > "$OUT/gpu_suite.log" 2>&1
echo "gpu suite rc $?" >> "$OUT/gpu.txt"
grep -E "PASSED|FAILED|ERROR|SKIPPED" "$OUT/gpu_suite.log" | sed 's/.*\] //' | sort > "$OUT/done.txt"
grep -A14 "slowest" "$OUT/gpu_suite.log" | cut -c1-150
tail -n 3 "$OUT/gpu_suite.log"
cat "$OUT/gpu.txt"
