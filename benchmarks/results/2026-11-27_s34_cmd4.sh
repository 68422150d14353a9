#!/usr/bin/env bash
# Session 34 (issue 18), command 4: the zoo's resnet50 and vit rows inductor and offload:auto
# (code 9ca84c3: "auto" held with the host and without it; a re-plan judged at the replaced
# plan's host pace).
#   OUT=dir bash benchmarks/results/2026-11-27_s34_cmd4.sh
set -u
source benchmarks/results/zoo_rows.sh
zoo_rows resnet50 resnet50 inductor,offload:auto 170 280
zoo_rows vit vit inductor,offload:auto 120 120
zoo_summary
