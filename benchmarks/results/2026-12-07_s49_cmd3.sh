#!/usr/bin/env bash
# Session 49 (issue 18), command 3: "auto" with each re-plan timed beside nothing moved (its timed calls
# alternating with calls of the graph with nothing moved, the overhead held against those): the GPU suite,
# then the example GPT's h100 preset interleaved with Inductor and SAC (session 48: its re-plan measured
# 3.6% over nothing moved's measurement a dozen steps before, and the plan made once more kept 8
# recomputations).
#   OUT=dir bash benchmarks/results/2026-12-07_s49_cmd3.sh
set -u
python -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1
source benchmarks/results/zoo_rows.sh
gpu_suite 240
interleaved_rows gpt gpt bfloat16 inductor,offload:auto,sac 220 --blocks blocks --rounds 2 --steps 6
grep -h -E "timed beside|measured it beside" "$OUT/gpt.log" | cut -c1-300
cat "$OUT/gpu.txt"
