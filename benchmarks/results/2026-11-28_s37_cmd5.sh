#!/usr/bin/env bash
# Session 37 (issue 18), command 5: the zoo's HF Llama rows for "auto" against Inductor
# and SAC, now that a plan that offloads compiles without Inductor's buffer pool
# (f19112f): "auto" at most 1.03x Inductor's step and at most 0.8x SAC's activation
# memory (session 35: 1.037x, 0.69x SAC's).
#   OUT=dir bash benchmarks/results/2026-11-28_s37_cmd5.sh
set -u
source benchmarks/results/zoo_rows.sh
zoo_rows llama llama inductor,sac,offload:auto 130 330
zoo_summary
