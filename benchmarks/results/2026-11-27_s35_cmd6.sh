#!/usr/bin/env bash
# Session 35 (issue 18), command 6: the zoo's resnet50 rows inductor and offload:auto with
# each row's host issue time and collections recorded (compare's host_step_ms, gc): is the
# "auto" row's back-to-back step (36.6 ms in command 1, synced 32.1) its host's?
#   OUT=dir bash benchmarks/results/2026-11-27_s35_cmd6.sh
set -u
source benchmarks/results/zoo_rows.sh
zoo_rows resnet50 resnet50 inductor,offload:auto 120 90
zoo_summary
