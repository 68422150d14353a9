#!/usr/bin/env bash
# Session 28 (issue 18), command 2: HF Llama at budget 0.12, what holds the measured step
# peak against what holds the predicted one (GraphPlan.predicted_holders).
#   OUT=dir bash benchmarks/results/2026-11-25_s28_cmd2.sh
set -u
export PYTHONPATH=$PWD OFFLOAD_COMPILER_PLAN_CACHE=0
P=benchmarks/results/2026-11-25_s28_peak_probe.py
timeout 290 python $P llama '{"memory_budget": 0.12}' 5 > $OUT/b012.log 2>&1
grep -v "Warning\|warn(" $OUT/b012.log | sed -n '/== graph 0/,/== graph 1/p' | cut -c1-250
