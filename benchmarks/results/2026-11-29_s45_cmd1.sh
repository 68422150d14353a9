#!/usr/bin/env bash
# Session 45 (issue 18), command 1: the GPU suite at this head (last run at e0271f9), then
# ResNet-50's forward allocations and host time per configuration, with Inductor's code.
#   OUT=dir bash benchmarks/results/2026-11-29_s45_cmd1.sh
set -u
source benchmarks/results/zoo_rows.sh
gpu_suite 240
timeout 300 python benchmarks/results/2026-11-29_s45_allocprobe.py --out "$OUT/alloc" > "$OUT/alloc.log" 2>&1
echo "allocprobe rc $?" >> "$OUT/gpu.txt"
tar czf "$OUT/alloc.tgz" -C "$OUT" alloc && rm -rf "$OUT/alloc"
cat "$OUT/alloc.log" "$OUT/gpu.txt"
