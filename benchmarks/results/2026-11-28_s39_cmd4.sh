#!/usr/bin/env bash
# Session 39 (issue 18), command 4: the transfer ops called without the dispatcher
# (ops.direct, lowering.call_directly). The probe (host time per pair, dispatched against
# direct; Inductor's code on this torch), then the GPU suite at the session's code.
#   OUT=dir bash benchmarks/results/2026-11-28_s39_cmd4.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader > "$OUT/gpu.txt"
python -c "import torch; print(torch.__version__)" >> "$OUT/gpu.txt"
timeout 100 python benchmarks/results/2026-11-28_s39_direct_probe.py > "$OUT/probe.log" 2>&1
echo "probe rc $?" >> "$OUT/gpu.txt"
timeout 240 python -m pytest -q -m gpu -n 6 --dist load -rfEx -p no:cacheprovider --durations=5 tests \
  > "$OUT/gpu_suite.log" 2>&1
echo "gpu suite rc $?" >> "$OUT/gpu.txt"
tail -n 12 "$OUT/probe.log" | cut -c1-200
tail -n 10 "$OUT/gpu_suite.log"
cat "$OUT/gpu.txt"
