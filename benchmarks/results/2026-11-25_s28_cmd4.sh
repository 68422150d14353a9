#!/usr/bin/env bash
# Session 28 (issue 18), command 4: predicted against measured step peak with the liveness
# of kernels Inductor fuses early (Liveness.early), first plans and re-plans.
#   OUT=dir bash benchmarks/results/2026-11-25_s28_cmd4.sh
set -u
export PYTHONPATH=$PWD OFFLOAD_COMPILER_PLAN_CACHE=0
P=benchmarks/results/2026-11-25_s28_peak_probe.py
run() { timeout $1 python $P $2 "$3" $4 > $OUT/$5.log 2>&1; echo "### $5: $2 $3"; grep -E "^== graph|^predicted:|^measured:|stopped" $OUT/$5.log | sed -E 's/corrections \{.*//' | cut -c1-160; grep -oE "step peak [0-9.]+ [GM]iB measured vs [0-9.]+ [GM]iB predicted \([^)]*\)" $OUT/$5.log; }
run 200 llama '{"memory_budget": 0.12}' 5 llama012
run 200 llama '{"memory_budget": 0.5}' 5 llama05
run 150 vit '{"memory_budget": 0.5}' 5 vit05
run 150 gpt '{"memory_budget": 0.5}' 5 gpt05
