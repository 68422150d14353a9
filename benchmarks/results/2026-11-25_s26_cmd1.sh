#!/usr/bin/env bash
# Session 26 (issue 19), command 1: the GC probe (2026-11-25_s26_gc_probe.py) on plan_cost.py and
# on first_step.py rows of HF Llama. OUT=dir bash benchmarks/results/2026-11-25_s26_cmd1.sh
set -u
export PYTHONPATH=$PWD
P=benchmarks/results/2026-11-25_s26_gc_probe.py
nproc; lscpu | grep -E "Model name|Thread|Core|Socket" ; python -V
python -c "from offload_compiler.planning.hardware import profile_for; profile_for('cuda')" > $OUT/calibrate.log 2>&1
for g in "" --gc-off; do OFFLOAD_COMPILER_PLAN_CACHE=0 python $P $g plan_cost.py --models llama,gpt --budgets 0.5 > $OUT/plan_cost$g.log 2>&1; grep -A3 "== partitioner\|^model\|^llama \|^gpt " $OUT/plan_cost$g.log | grep -v "^--"; done
python benchmarks/first_step.py --model tiny_gpt --strategy inductor --no-timers > $OUT/warmup.log 2>&1
for row in "inductor" "offload:0.5" "offload:0.5 --gc-off" "inductor" "offload:0.5"; do
  set -- $row
  timeout 150 python $P ${2:-} first_step.py --model llama --strategy $1 --no-timers >> $OUT/fs.log 2>&1
  grep -E "first step|OffloadPart|min-cut \(" $OUT/fs.log | tail -2
done
