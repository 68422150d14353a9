#!/usr/bin/env bash
# Session 39 (issue 18), command 3, after the pool change was taken back (commands 1-2):
# the transfer ops' host time outside a measured call (the probe), then the GPU suite at
# the session's code.
#   OUT=dir bash benchmarks/results/2026-11-28_s39_cmd3.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader > "$OUT/gpu.txt"
python -c "import torch; print(torch.__version__)" >> "$OUT/gpu.txt"
timeout 90 python benchmarks/results/2026-11-28_s39_transfer_host_probe.py > "$OUT/probe.log" 2>&1
echo "probe rc $?" >> "$OUT/gpu.txt"
timeout 240 python -m pytest -q -m gpu -n 6 --dist load -rfEx -p no:cacheprovider --durations=5 tests \
  > "$OUT/gpu_suite.log" 2>&1
echo "gpu suite rc $?" >> "$OUT/gpu.txt"
head -n 40 "$OUT/probe.log" | cut -c1-150
tail -n 14 "$OUT/probe.log"
tail -n 12 "$OUT/gpu_suite.log"
cat "$OUT/gpu.txt"
