#!/usr/bin/env bash
# Session 40 (issue 18), command 2: ResNet-50's first plan with and without Inductor's
# buffer pool, in one process (the pool probe).
#   OUT=dir bash benchmarks/results/2026-11-28_s40_cmd2.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader > "$OUT/gpu.txt"
python -c "import torch; print(torch.__version__)" >> "$OUT/gpu.txt"
timeout 480 python benchmarks/results/2026-11-28_s40_pool_probe.py > "$OUT/pool_probe.log" 2>&1
echo "pool probe rc $?" >> "$OUT/gpu.txt"
grep -v Warning "$OUT/pool_probe.log" | tail -n 14 | cut -c1-200
cat "$OUT/gpu.txt"
