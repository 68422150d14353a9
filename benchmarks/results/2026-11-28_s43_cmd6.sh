#!/usr/bin/env bash
# Session 43 (issue 18), command 6: HF Llama compiled one block at a time (zoo llama_blocks:
# Inductor, "auto"), not run since session 38.
#   OUT=dir bash benchmarks/results/2026-11-28_s43_cmd6.sh
set -u
source benchmarks/results/zoo_rows.sh
zoo_rows llama_blocks llama_blocks inductor,offload:auto 140 120
zoo_summary
