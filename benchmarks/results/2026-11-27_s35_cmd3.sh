#!/usr/bin/env bash
# Session 35 (issue 18), command 3: ViT-B/16 planned without offloading
# (--offload-options '{"max_host_bytes": 0}': recomputation only) at SAC's activation
# memory (offload:0.65) and at "auto", beside Inductor and SAC in the same command.
#   OUT=dir bash benchmarks/results/2026-11-27_s35_cmd3.sh
set -u
source benchmarks/results/zoo_rows.sh
zoo_rows vit vit inductor,sac 120 90
zoo_rows vit_recompute vit offload:0.65,offload:auto 120 150 --offload-options '{"max_host_bytes": 0}'
zoo_summary
