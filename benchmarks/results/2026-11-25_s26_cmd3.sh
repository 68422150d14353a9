#!/usr/bin/env bash
# Session 26 (issue 19), command 3: HF Llama first steps with the collector tuned for the
# backend's whole compile (offload_compiler/gc_scope.py), through the GC probe; then the
# GPU suite.   OUT=dir bash benchmarks/results/2026-11-25_s26_cmd3.sh
set -u
export PYTHONPATH=$PWD
P=benchmarks/results/2026-11-25_s26_gc_probe.py
python -c "from offload_compiler.planning.hardware import profile_for; profile_for('cuda')" > $OUT/calibrate.log 2>&1
python benchmarks/first_step.py --model tiny_gpt --strategy inductor --no-timers > $OUT/warmup.log 2>&1
for s in offload:0.5 inductor offload:0.5 offload:auto; do
  timeout 150 python $P first_step.py --model llama --strategy $s --no-timers >> $OUT/fs3.log 2>&1
  grep -E "first step|entered|OffloadPart|min-cut \(|whole process" $OUT/fs3.log | tail -4
done
python -m pytest -q -m gpu -n 6 --dist load -rfEx -p no:cacheprovider tests > $OUT/suite.log 2>&1
tail -3 $OUT/suite.log
