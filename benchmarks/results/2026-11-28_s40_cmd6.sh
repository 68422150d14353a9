#!/usr/bin/env bash
# Session 40 (issue 18), command 6, as it ran (inline): the compile probe.
#   OUT=dir bash benchmarks/results/2026-11-28_s40_cmd6.sh
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 200 python benchmarks/results/2026-11-28_s40_compile_probe.py 2>&1 | grep -v Warn \
  | tee "$OUT/compile_probe.log" | tail -16
