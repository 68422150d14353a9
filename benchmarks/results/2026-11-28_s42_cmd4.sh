#!/usr/bin/env bash
# Session 42 (issue 18), command 4: the GPU suite with recomputation fitted apart
# (planning.judging.recompute_fitted), then ResNet-50's zoo rows at full checkpointing's
# memory and under memory limits (not run since session 37's code): Inductor, full
# checkpointing, memory_limit = full checkpointing's peak, and the midpoint of the two.
#   OUT=dir bash benchmarks/results/2026-11-28_s42_cmd4.sh
set -u
source benchmarks/results/zoo_rows.sh
timeout 200 python -m pytest -q -m gpu -n 6 --dist load -rfEx -p no:cacheprovider --durations=5 tests \
  > "$OUT/gpu_suite.log" 2>&1
echo "gpu suite rc $?" >> "$OUT/gpu.txt"
grep -E "^[.sFEx]+ " "$OUT/gpu_suite.log" | tr -d ' [%]0-9\n' | fold -w1 | sort | uniq -c
grep -E "FAILED|ERROR|passed|failed" "$OUT/gpu_suite.log" | tail -n 5
zoo_rows resnet50 resnet50 inductor,full_ac,offload-limit:FULL,offload-limit:MID 120 290
zoo_summary
