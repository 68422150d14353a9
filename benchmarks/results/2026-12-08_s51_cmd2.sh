#!/usr/bin/env bash
# Session 51 (issue 18), command 2: ViT-B/16 at "auto" interleaved with Inductor and SAC (session 48: its
# offload plan's backward, compiled without Inductor's buffer pool, was host-paced, 548 allocations against
# 322, and "auto" kept a recompute-only plan at 1.04x SAC's memory; a backward that offloads now keeps the pool
# where the plan's replay finds it adds nothing).
#   OUT=dir bash benchmarks/results/2026-12-08_s51_cmd2.sh
set -u
python -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1
source benchmarks/results/zoo_rows.sh
interleaved_rows vit vit float32 inductor,offload:auto,sac 215 --blocks model.blocks --rounds 3 --steps 6
cat "$OUT/gpu.txt"
