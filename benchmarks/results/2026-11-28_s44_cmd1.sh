#!/usr/bin/env bash
# Session 44 (issue 18), command 1: the GPU suite with recomputations priced on what the
# backward's fused kernels read through casts (costs.fused_backward_reads given the saved
# values: under autocast a GELU output is recomputed at its write alone), then ViT-B/16
# interleaved: Inductor, "auto" and SAC on its blocks.
#   OUT=dir bash benchmarks/results/2026-11-28_s44_cmd1.sh
set -u
source benchmarks/results/zoo_rows.sh
timeout 230 python -m pytest -q -m gpu -n 6 --dist load -rfEx -p no:cacheprovider --durations=5 tests \
  > "$OUT/gpu_suite.log" 2>&1
echo "gpu suite rc $?" >> "$OUT/gpu.txt"
grep -E "FAILED|ERROR|passed|failed" "$OUT/gpu_suite.log" | tail -n 8
interleaved_rows vit vit float32 inductor,offload:auto,sac 300 --blocks model.blocks --rounds 3 --steps 8
cat "$OUT/gpu.txt"
