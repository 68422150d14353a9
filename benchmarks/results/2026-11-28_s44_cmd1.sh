#!/usr/bin/env bash
# Session 44 (issue 18), command 1: the GPU suite with recomputations priced on what the
# backward's fused kernels read through casts (fused_backward_reads given the saved
# values: under autocast a GELU output is recomputed at its write alone), then ViT-B/16
# interleaved: Inductor, "auto" and SAC on its blocks.
#   OUT=dir bash benchmarks/results/2026-11-28_s44_cmd1.sh
set -u
source benchmarks/results/zoo_rows.sh
gpu_suite 230
interleaved_rows vit vit float32 inductor,offload:auto,sac 300 --blocks model.blocks --rounds 3 --steps 8
cat "$OUT/gpu.txt"
