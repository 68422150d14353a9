#!/usr/bin/env bash
# Session 34 (issue 18), command 2: ResNet-50's steps under Inductor, nothing moved and
# "auto", phase by phase (2026-11-27_s34_step_probe.py), then the zoo's gpt rows inductor
# and offload:auto (code 50ac0f8: "auto" held with the host and without it).
#   OUT=dir bash benchmarks/results/2026-11-27_s34_cmd2.sh
set -u
source benchmarks/results/zoo_rows.sh
timeout 290 python benchmarks/results/2026-11-27_s34_step_probe.py resnet50 > $OUT/step_probe.log 2>&1
zoo_rows gpt gpt inductor,offload:auto 150 130
grep -v "^    " $OUT/step_probe.log | grep -E "^(inductor|none|auto)" || tail -5 $OUT/step_probe.log
zoo_summary
