#!/usr/bin/env bash
# Session 50 (issue 18), command 2: the example GPT's h100 preset and ViT-B/16 at full checkpointing's memory
# (offload-limit:FULL, memory_limit = full_ac's measured step peak), with the rows it derives from, under the
# planner that counts a nested recomputation where it is made (command 1: ResNet-50 met that memory at 0.953x
# full checkpointing's step). Not run since sessions 37 to 44.
#   OUT=dir bash benchmarks/results/2026-12-07_s50_cmd2.sh
set -u
python -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1
source benchmarks/results/zoo_rows.sh
zoo_rows gpt gpt inductor,full_ac,offload-limit:FULL 110 200
zoo_rows vit vit inductor,full_ac,offload-limit:FULL 100 110
zoo_summary
