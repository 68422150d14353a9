#!/usr/bin/env bash
# Session 51 (issue 18), command 2: the example GPT's h100 preset at "auto" interleaved with Inductor and SAC
# (its re-plans judged against nothing moved timed beside them, session 49; a backward that offloads keeps
# Inductor's buffer pool where the plan's replay finds it adds nothing to the step peak, this session), then
# HF Llama at full checkpointing's memory (offload-limit:FULL), not yet run.
#   OUT=dir bash benchmarks/results/2026-12-08_s51_cmd2.sh
set -u
python -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1
source benchmarks/results/zoo_rows.sh
interleaved_rows gpt gpt bfloat16 inductor,offload:auto,sac 225 --blocks blocks --rounds 2 --steps 6
grep -h -E "timed beside|measured it beside" "$OUT/gpt.log" | cut -c1-300
zoo_rows llama llama inductor,full_ac,offload-limit:FULL 110 210
zoo_summary
