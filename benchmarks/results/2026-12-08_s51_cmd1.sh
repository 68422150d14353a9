#!/usr/bin/env bash
# Session 51 (issue 18), command 1: the GPU suite with a backward that offloads keeping Inductor's buffer pool
# where the plan's replay finds it adds nothing to the step peak (lowering.plan_pool; until now every backward
# with transfer ops went without it), then ViT-B/16 at "auto" interleaved with Inductor and SAC (session 48:
# its offload plan's backward was host-paced, 548 allocations against 322, and "auto" kept a recompute-only
# plan at 1.04x SAC's memory).
#   OUT=dir bash benchmarks/results/2026-12-08_s51_cmd1.sh
set -u
python -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1
source benchmarks/results/zoo_rows.sh
gpu_suite 215
grep -E "buffer_pool|allocates_no_more" "$OUT/gpu_suite.log" | cut -c1-300 | head -n 5
interleaved_rows vit vit float32 inductor,offload:auto,sac 330 --blocks model.blocks --rounds 3 --steps 6
cat "$OUT/gpu.txt"
