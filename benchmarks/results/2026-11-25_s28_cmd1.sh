#!/usr/bin/env bash
# Session 28 (issue 18), command 1: what holds HF Llama's measured step peak at a low
# budget and at full checkpointing's memory, against the planner's prediction.
#   OUT=dir bash benchmarks/results/2026-11-25_s28_cmd1.sh
set -u
export PYTHONPATH=$PWD OFFLOAD_COMPILER_PLAN_CACHE=0
P=benchmarks/results/2026-11-25_s28_peak_probe.py
timeout 290 python $P llama '{"memory_budget": 0.12}' 8 > $OUT/b012.log 2>&1
timeout 290 python $P llama '{"memory_limit": "3824MiB"}' 10 > $OUT/limit.log 2>&1
for f in b012 limit; do echo "### $f"; grep -v "Warning\|warn(" $OUT/$f.log | grep -E "^step|^==|^predicted|^measured|step peak|stopped|Error" | cut -c1-400; done
