#!/usr/bin/env bash
# Session 40 (issue 18), command 1: the host block's own events (probe, old bodies against
# new, interleaved), what an offload plan still adds to ResNet-50's forward with the ops
# called directly (ablation probe), then the GPU suite at the session's code.
#   OUT=dir bash benchmarks/results/2026-11-28_s40_cmd1.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader > "$OUT/gpu.txt"
python -c "import torch; print(torch.__version__)" >> "$OUT/gpu.txt"
timeout 60 python benchmarks/results/2026-11-28_s40_event_probe.py > "$OUT/event_probe.log" 2>&1
echo "event probe rc $?" >> "$OUT/gpu.txt"
timeout 240 python -m pytest -q -m gpu -n 6 --dist load -rfEx -p no:cacheprovider --durations=5 tests \
  > "$OUT/gpu_suite.log" 2>&1
echo "gpu suite rc $?" >> "$OUT/gpu.txt"
timeout 220 python benchmarks/results/2026-11-28_s40_ablation_probe.py > "$OUT/ablation.log" 2>&1
echo "ablation rc $?" >> "$OUT/gpu.txt"
tail -n 4 "$OUT/event_probe.log" | cut -c1-200
tail -n 6 "$OUT/ablation.log" | cut -c1-200
tail -n 8 "$OUT/gpu_suite.log"
cat "$OUT/gpu.txt"
