#!/usr/bin/env bash
# Session 38 (issue 18), command 3: kernel launches, allocations and host time per phase
# of ResNet-50 with nothing moved, an offload plan and "auto" without re-planning
# (2026-11-28_s38_launch_probe.py).
#   OUT=dir bash benchmarks/results/2026-11-28_s38_cmd3.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader > "$OUT/gpu.txt"
python -c "import torch; print(torch.__version__)" >> "$OUT/gpu.txt"
timeout 400 python benchmarks/results/2026-11-28_s38_launch_probe.py > "$OUT/probe.log" 2>&1
echo "probe rc $?" >> "$OUT/gpu.txt"
tail -n 12 "$OUT/probe.log"
cat "$OUT/gpu.txt"
