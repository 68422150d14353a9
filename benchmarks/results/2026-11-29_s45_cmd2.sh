#!/usr/bin/env bash
# Session 45 (issue 18), command 2: why Inductor refuses buffer reuse in a recompute-only
# plan's forward (command 1: 599 allocations against 327): its own peak estimate and each reuse
# it weighed, for nothing moved, a recompute-only plan and full checkpointing (Inductor's own
# recomputation); then ResNet-50's "auto" interleaved with Inductor at this head.
#   OUT=dir bash benchmarks/results/2026-11-29_s45_cmd2.sh
set -u
source benchmarks/results/zoo_rows.sh
timeout 280 python benchmarks/results/2026-11-29_s45_allocprobe.py --out "$OUT/alloc" \
  --configs none,recompute_0.7,full_ac > "$OUT/alloc.log" 2>&1
echo "allocprobe rc $?" >> "$OUT/gpu.txt"
rm -f "$OUT"/alloc/code_*.log; tar czf "$OUT/alloc.tgz" -C "$OUT" alloc && rm -rf "$OUT/alloc"
cat "$OUT/alloc.log"
interleaved_rows resnet50 resnet50 float32 inductor,offload:auto 250 --rounds 3 --steps 6
cat "$OUT/gpu.txt"
