#!/usr/bin/env bash
# Session 48 (issue 18), command 3: HF Llama's "auto" interleaved with Inductor and the example
# GPT's h100 preset with Inductor and SAC, with a forward that offloads keeping Inductor's buffer
# pool (the step peak its replay predicts against the one measured).
#   OUT=dir bash benchmarks/results/2026-12-07_s48_cmd3.sh
set -u
python -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1
source benchmarks/results/zoo_rows.sh
interleaved_rows llama llama bfloat16 inductor,offload:auto 240 --rounds 3 --steps 6
interleaved_rows gpt gpt bfloat16 inductor,offload:auto,sac 190 --blocks blocks --rounds 3 --steps 6
cat "$OUT/gpu.txt"
