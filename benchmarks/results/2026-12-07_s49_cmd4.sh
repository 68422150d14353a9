#!/usr/bin/env bash
# Session 49 (issue 18), command 4 (command 3 less the GPT rows, for what device time is left): the GPU
# suite with "auto"'s re-plans timed beside nothing moved
# (tests/test_gpu.py::test_auto_measures_nothing_moved_first_and_judges_its_replan_against_it checks it).
#   OUT=dir bash benchmarks/results/2026-12-07_s49_cmd4.sh
set -u
python -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1
source benchmarks/results/zoo_rows.sh
gpu_suite 240
grep -E "judges_its_replan|timed beside" "$OUT/gpu_suite.log" | cut -c1-300 | head -n 5
cat "$OUT/gpu.txt"
