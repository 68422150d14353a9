#!/usr/bin/env bash
# Session 51 (issue 18), command 1: the GPU suite with a backward that offloads keeping Inductor's buffer pool
# where the plan's replay finds it adds nothing to the step peak (lowering.plan_pool; until now every backward
# with transfer ops went without it), then the example GPT's h100 preset at "auto" interleaved with Inductor
# and SAC (its re-plans judged against nothing moved timed beside them, session 49; session 48 kept a plan at
# 0.949x SAC's memory after judging a 0.72x one 3.6% over a measurement a dozen steps old).
#   OUT=dir bash benchmarks/results/2026-12-08_s51_cmd1.sh
set -u
python -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1
source benchmarks/results/zoo_rows.sh
gpu_suite 210
grep -E "buffer_pool|allocates_no_more" "$OUT/gpu_suite.log" | cut -c1-300 | head -n 5
interleaved_rows gpt gpt bfloat16 inductor,offload:auto,sac 225 --blocks blocks --rounds 2 --steps 6
grep -h -E "timed beside|measured it beside" "$OUT/gpt.log" | cut -c1-300
cat "$OUT/gpu.txt"
