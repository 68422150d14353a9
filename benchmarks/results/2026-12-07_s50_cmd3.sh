#!/usr/bin/env bash
# Session 50 (issue 18), command 3, in the device time left (352 s): the example GPT's h100 preset at "auto",
# interleaved with Inductor and SAC over two rounds, its re-plans judged against nothing moved timed beside
# them (session 49's change; session 48 judged its re-plan 3.6% over a measurement a dozen steps old).
#   OUT=dir bash benchmarks/results/2026-12-07_s50_cmd3.sh
set -u
python -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1
source benchmarks/results/zoo_rows.sh
interleaved_rows gpt gpt bfloat16 inductor,offload:auto,sac 225 --blocks blocks --rounds 2 --steps 6
grep -h -E "timed beside|measured it beside" "$OUT/gpt.log" | cut -c1-300
cat "$OUT/gpu.txt"
