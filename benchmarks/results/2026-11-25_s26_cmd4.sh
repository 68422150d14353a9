#!/usr/bin/env bash
# Session 26 (issue 19), command 4: HF Llama at 0.5 with and without gc_scope.py's tuning
# (the probe's --no-scope), alternating on one machine, and an Inductor row.
#   OUT=dir bash benchmarks/results/2026-11-25_s26_cmd4.sh
set -u
export PYTHONPATH=$PWD
P=benchmarks/results/2026-11-25_s26_gc_probe.py
python -c "from offload_compiler.planning.hardware import profile_for; profile_for('cuda')" > $OUT/calibrate.log 2>&1
python benchmarks/first_step.py --model tiny_gpt --strategy inductor --no-timers > $OUT/warmup.log 2>&1
for row in "offload:0.5 --no-scope" "offload:0.5" "inductor" "offload:0.5 --no-scope" "offload:0.5"; do
  set -- $row
  echo "== $row" >> $OUT/fs4.log
  timeout 150 python $P ${2:-} first_step.py --model llama --strategy $1 --no-timers >> $OUT/fs4.log 2>&1
  echo "$row: $(grep -E "first step" $OUT/fs4.log | tail -1)"; grep "whole process" $OUT/fs4.log | tail -1
done
