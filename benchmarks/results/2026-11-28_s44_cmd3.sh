#!/usr/bin/env bash
# Session 44 (issue 18), command 3: recomputations that share a read with a backward kernel
# priced without a launch of their own (costs._shares_read), on top of e0271f9's reads through
# casts: ViT-B/16 interleaved (Inductor, "auto", SAC), then the example GPT's h100 preset
# (Inductor, "auto", SAC), whose plan the change moves on the CPU (auto 1.028x -> 1.016x predicted).
#   OUT=dir bash benchmarks/results/2026-11-28_s44_cmd3.sh
set -u
source benchmarks/results/zoo_rows.sh
interleaved_rows vit vit float32 inductor,offload:auto,sac 290 --blocks model.blocks --rounds 3 --steps 8
interleaved_rows gpt gpt bfloat16 inductor,offload:auto,sac 200 --blocks blocks --rounds 3 --steps 6
cat "$OUT/gpu.txt"
