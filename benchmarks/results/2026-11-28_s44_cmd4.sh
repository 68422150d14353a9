#!/usr/bin/env bash
# Session 44 (issue 18), command 4: ResNet-50 with recomputations priced through casts and
# without a launch where they share a read with a backward kernel (e0271f9, d4cf626 on): "auto"
# interleaved with Inductor and full checkpointing, then the zoo's row at full checkpointing's
# memory (no plan reached it in session 42: 149 MiB short).
#   OUT=dir bash benchmarks/results/2026-11-28_s44_cmd4.sh
set -u
source benchmarks/results/zoo_rows.sh
interleaved_rows resnet50 resnet50 float32 inductor,offload:auto,full_ac 250 --blocks bottlenecks --rounds 3 --steps 8
zoo_rows resnet50 resnet50 inductor,full_ac,offload-limit:FULL 120 200
zoo_summary
