#!/usr/bin/env bash
# Session 49 (issue 18), command 1: the GPU suite with a forward that offloads keeping Inductor's
# buffer pool (session 48 never ran it so), then where ViT-B/16's offload backward spends its host
# time: nothing moved against a fixed budget of 0.7 (no re-plan), three steps each under cProfile.
#   OUT=dir bash benchmarks/results/2026-12-07_s49_cmd1.sh
set -u
python -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1
source benchmarks/results/zoo_rows.sh
gpu_suite 320
interleaved_rows vit_profile vit float32 offload:none,offload:0.7 230 --rounds 2 --steps 5 \
  --offload-options '{"replan": false}' --host-profile 3
grep -A 28 "cProfile\|top functions\|own time" "$OUT/vit_profile.log" | cut -c1-200 | head -n 90
cat "$OUT/gpu.txt"
