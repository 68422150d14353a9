#!/usr/bin/env bash
# Session 49 (issue 18), command 2: the targets not run since sessions 37 to 44 on the GPT preset and
# ViT-B/16: full checkpointing's memory (offload-limit:FULL, memory_limit = full_ac's measured step
# peak) and a memory limit halfway to it (offload-limit:MID, GPT only), with the rows they derive from.
#   OUT=dir bash benchmarks/results/2026-12-07_s49_cmd2.sh
set -u
python -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1
source benchmarks/results/zoo_rows.sh
zoo_rows gpt gpt inductor,full_ac,offload-limit:FULL,offload-limit:MID 110 230
zoo_rows vit vit inductor,full_ac,offload-limit:FULL 100 100
zoo_summary
