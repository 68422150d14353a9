#!/usr/bin/env bash
# Session 42 (issue 18), command 2: the host-wait probe on ViT-B/16 and ResNet-50.
#   OUT=dir bash benchmarks/results/2026-11-28_s42_cmd2.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
for m in vit resnet50; do
  MODEL=$m timeout 260 python benchmarks/results/2026-11-28_s42_host_block_probe.py > "$OUT/probe_$m.log" 2>&1
  echo "$m rc $?"
  grep -v Warning "$OUT/probe_$m.log" | grep -E "^(2\.|variant|nothing|offload|    _|    issue|    release)" 
done
