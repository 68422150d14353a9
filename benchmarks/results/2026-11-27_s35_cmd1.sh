#!/usr/bin/env bash
# Session 35 (issue 18), command 1: the zoo's resnet50 rows (inductor, offload:auto) and
# vit rows (inductor, sac, offload:auto) at 0dc0d69: the first GPU run of plans compared
# with each phase at least at its host's time (planning.replan.at_least_host).
#   OUT=dir bash benchmarks/results/2026-11-27_s35_cmd1.sh
set -u
source benchmarks/results/zoo_rows.sh
zoo_rows resnet50 resnet50 inductor,offload:auto 170 280
zoo_rows vit vit inductor,sac,offload:auto 120 170
zoo_summary
