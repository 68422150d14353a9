#!/usr/bin/env bash
# Session 28 (issue 18), command 6: first plans' predicted step peak against the whole
# step's measured peak (max_memory_allocated above what was held before the forward),
# no re-plan, where the early-fused liveness moved the prediction (GPT preset, HF Llama).
#   OUT=dir bash benchmarks/results/2026-11-25_s28_cmd6.sh
set -u
export PYTHONPATH=$PWD OFFLOAD_COMPILER_PLAN_CACHE=0
P=benchmarks/results/2026-11-25_s28_peak_probe.py
for spec in "gpt 0.5" "gpt auto" "llama auto"; do
  set -- $spec
  b=$2; [ "$b" = auto ] && b='"auto"'
  timeout 170 python $P $1 "{\"memory_budget\": $b, \"replan\": false}" 3 > $OUT/$1_$2.log 2>&1
  echo "### $1 $2"; grep -E "^step [12]|^predicted:" $OUT/$1_$2.log
done
