#!/usr/bin/env bash
# Session 33 (issue 18), command 4: where a transfer op's host time outside its body goes:
# the kernel-launch probe on ResNet-50 again with each profiled step's ops by host self time.
#   OUT=dir bash benchmarks/results/2026-11-27_s33_cmd4.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/gpu.txt
python -c "import torch; print(torch.__version__)" >> $OUT/gpu.txt
TABLE=1 timeout 280 python benchmarks/results/2026-11-27_s33_kernel_probe.py resnet50 0.5 > $OUT/kernel_probe_table.log 2>&1
grep -E '^(inductor|none|budget)' $OUT/kernel_probe_table.log | grep launches
grep -E 'Name|offload::|aten::copy_|cudaMemcpy|cudaLaunch|cudaStream|cudaEvent|Self CPU time total|^budget|^none' $OUT/kernel_probe_table.log | cut -c1-200 | head -60
cat $OUT/gpu.txt
