#!/usr/bin/env bash
# Session 34 (issue 18), command 1: "auto" decides on its overhead with the measured host
# and without it (Lanes.without_host, planning/search.py _without_host); the zoo's resnet50
# and vit rows inductor and offload:auto.
#   OUT=dir bash benchmarks/results/2026-11-27_s34_cmd1.sh
set -u
source benchmarks/results/zoo_rows.sh
zoo_rows resnet50 resnet50 inductor,offload:auto 170 300
zoo_rows vit vit inductor,offload:auto 120 170
zoo_summary
