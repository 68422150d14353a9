#!/usr/bin/env bash
# Session 43 (issue 18), command 1: the GPU suite at session 42's head, then ResNet-50's zoo
# rows under the midpoint memory limit, where the first plan now holds back room for the first
# steps (limits.FIRST_STEPS_FACTOR) and plans again for the room once measured
# (replan.unreserved). Warm caches on torch 2.11: no "Failed to pickle cache key" expected.
#   OUT=dir bash benchmarks/results/2026-11-28_s43_cmd1.sh
set -u
source benchmarks/results/zoo_rows.sh
timeout 230 python -m pytest -q -m gpu -n 6 --dist load -rfEx -p no:cacheprovider --durations=5 tests \
  > "$OUT/gpu_suite.log" 2>&1
echo "gpu suite rc $?" >> "$OUT/gpu.txt"
grep -E "FAILED|ERROR|passed|failed" "$OUT/gpu_suite.log" | tail -n 8
zoo_rows resnet50 resnet50 inductor,full_ac,offload-limit:MID 120 250
echo "pickle-failures $(cat "$OUT"/zoo_resnet50.log "$OUT"/zoo_resnet50/*/*.log | grep -c 'Failed to pickle')" >> "$OUT/gpu.txt"
grep -h -E 'held back|room|first steps' "$OUT"/zoo_resnet50/*/*.log 2>/dev/null | cut -c1-400 | head -n 12
zoo_summary
