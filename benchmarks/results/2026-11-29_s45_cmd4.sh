#!/usr/bin/env bash
# Session 45 (issue 18), command 4: with Inductor's buffer reuse weighed against an estimate that
# counts the graph's outputs in the backend's compiles (reuse_estimate.py): ResNet-50's forward
# allocations (nothing moved, a recompute-only plan), the GPU suite, and ResNet-50's "auto"
# interleaved with Inductor.
#   OUT=dir bash benchmarks/results/2026-11-29_s45_cmd4.sh
set -u
source benchmarks/results/zoo_rows.sh
timeout 160 python benchmarks/results/2026-11-29_s45_allocprobe.py --out "$OUT/alloc" \
  --configs recompute_0.7,keep_all > "$OUT/alloc.log" 2>&1
echo "allocprobe rc $?" >> "$OUT/gpu.txt"
rm -f "$OUT"/alloc/code_*.log; tar czf "$OUT/alloc.tgz" -C "$OUT" alloc && rm -rf "$OUT/alloc"
cat "$OUT/alloc.log"
gpu_suite 220
interleaved_rows resnet50 resnet50 float32 inductor,offload:auto 200 --rounds 2 --steps 6
cat "$OUT/gpu.txt"
