#!/usr/bin/env bash
# Session 44 (issue 18), command 5: ResNet-50's "auto" interleaved with Inductor once a read
# counts as shared only with a backward kernel that may run before the recomputation's extern
# consumers (planning/fusion.py; command 4's plan recomputed 163 values, 33% over).
#   OUT=dir bash benchmarks/results/2026-11-28_s44_cmd5.sh
set -u
source benchmarks/results/zoo_rows.sh
interleaved_rows resnet50 resnet50 float32 inductor,offload:auto 215 --rounds 2 --steps 6
cat "$OUT/gpu.txt"
