#!/usr/bin/env bash
# Session 26 (issue 19), command 2: the collector's settings at the partitioner, and the
# collections of a whole first step (2026-11-25_s26_gc_probe.py), HF Llama rows.
#   OUT=dir bash benchmarks/results/2026-11-25_s26_cmd2.sh
set -u
export PYTHONPATH=$PWD
P=benchmarks/results/2026-11-25_s26_gc_probe.py
OFFLOAD_COMPILER_PLAN_CACHE=0 python $P plan_cost.py --models llama --budgets 0.5 > $OUT/plan_cost2.log 2>&1
grep -A4 "== partitioner" $OUT/plan_cost2.log
for s in inductor offload:0.5 offload:0.5 inductor; do
  timeout 150 python $P first_step.py --model llama --strategy $s --no-timers >> $OUT/fs2.log 2>&1
  grep -E "first step|entered|OffloadPart|min-cut \(|whole process" $OUT/fs2.log | tail -4
done
