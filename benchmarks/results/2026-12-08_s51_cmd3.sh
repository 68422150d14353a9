#!/usr/bin/env bash
# Session 51 (issue 18), command 3 (what fits in the device time left after refused starts): the GPU suite
# alone, with a backward that offloads keeping Inductor's buffer pool where the plan's replay finds it adds
# nothing to the step peak (lowering.plan_pool).
#   OUT=dir bash benchmarks/results/2026-12-08_s51_cmd3.sh
set -u
python -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1
source benchmarks/results/zoo_rows.sh
gpu_suite 215
cat "$OUT/gpu.txt"
