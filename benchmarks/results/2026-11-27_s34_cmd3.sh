#!/usr/bin/env bash
# Session 34 (issue 18), command 3: the zoo's llama rows inductor, full_ac, the memory limit
# at full checkpointing's measured peak (offload-limit:FULL) and offload:auto (code: "auto"
# held with the host and without it; a re-plan judged at the replaced plan's host pace).
#   OUT=dir bash benchmarks/results/2026-11-27_s34_cmd3.sh
set -u
source benchmarks/results/zoo_rows.sh
zoo_rows llama llama inductor,full_ac,offload-limit:FULL,offload:auto 150 390
zoo_summary
