#!/usr/bin/env bash
# Session 45 (issue 18), command 3: how torch 2.11's Inductor estimates a graph's peak for buffer
# reuse (its source), and the estimate of a small training forward with each output's size.
#   OUT=dir bash benchmarks/results/2026-11-29_s45_cmd3.sh
export PYTHONPATH=$PWD
TORCHINDUCTOR_FORCE_DISABLE_CACHES=1 timeout 200 python benchmarks/results/2026-11-29_s45_estimate_source.py \
  > "$OUT/estimate_source.txt" 2>&1
echo rc $?
grep -A3 "==== estimate" "$OUT/estimate_source.txt" | cut -c1-1500
