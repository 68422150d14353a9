#!/usr/bin/env bash
# Session 32 (issue 18), command 1: the GPU suite (the calibration test checks the
# convolution rates of 991adb2; the transfer ops switch streams through streams.on, 2cc8b86),
# then ViT-B/16 step by step with the host's wall and CPU time, context switches, core
# and cgroup throttling (2026-11-27_s32_host_probe.py): "auto" free and pinned to one
# core, Inductor free.
#   OUT=dir bash benchmarks/results/2026-11-27_s32_cmd1.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/gpu.txt
python -c "import torch; print(torch.__version__)" >> $OUT/gpu.txt
(lscpu | grep -E "Model name|^CPU\(s\)|NUMA|MHz|Thread"; nproc) >> $OUT/gpu.txt 2>&1
P=benchmarks/results/2026-11-27_s32_host_probe.py
A='{"memory_budget": "auto"}'
timeout 260 python -m pytest -q -m gpu -n 6 --dist load -rfEx -p no:cacheprovider tests > $OUT/suite.log 2>&1
timeout 90 python $P vit "$A" 18 > $OUT/vit_auto.log 2>&1
PIN=5 timeout 90 python $P vit "$A" 18 > $OUT/vit_auto_pin.log 2>&1
timeout 70 python $P vit inductor 18 > $OUT/vit_inductor.log 2>&1
tail -5 $OUT/suite.log | cut -c1-300
for f in vit_auto vit_auto_pin vit_inductor; do
  echo "== $f"; grep -E "^cores|^step|measured graph|Error" $OUT/$f.log | cut -c1-220
done
cat $OUT/gpu.txt
