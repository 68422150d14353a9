#!/usr/bin/env bash
# Session 38 (issue 18), command 2: the host's own time to issue ResNet-50's forward and
# backward under Inductor, the backend with nothing moved and an offload plan, rounds
# interleaved (2026-11-28_s38_host_level_probe.py).
#   OUT=dir bash benchmarks/results/2026-11-28_s38_cmd2.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader > "$OUT/gpu.txt"
python -c "import torch; print(torch.__version__)" >> "$OUT/gpu.txt"
timeout 400 python benchmarks/results/2026-11-28_s38_host_level_probe.py > "$OUT/probe.log" 2>&1
echo "probe rc $?" >> "$OUT/gpu.txt"
tail -n 20 "$OUT/probe.log"
cat "$OUT/gpu.txt"
