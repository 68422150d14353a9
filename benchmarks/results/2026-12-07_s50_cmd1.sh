#!/usr/bin/env bash
# Session 50 (issue 18), command 1: the GPU suite ("auto"'s re-plans timed beside nothing moved, session 49,
# not yet run on a GPU), then ResNet-50 at full checkpointing's memory (offload-limit:FULL) with a nested
# recomputation counted where the recomputation that reads it is made (planning/nested.py): session 44
# found no plan there (478.1 MiB short).
#   OUT=dir bash benchmarks/results/2026-12-07_s50_cmd1.sh
set -u
python -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1
source benchmarks/results/zoo_rows.sh
gpu_suite 230
grep -E "judges_its_replan|timed beside" "$OUT/gpu_suite.log" | cut -c1-300 | head -n 5
zoo_rows resnet50 resnet50 inductor,full_ac,offload-limit:FULL 110 190
zoo_summary
