#!/usr/bin/env bash
# Session 36 (issue 18), command 9, refused (no device time was left): measure the change
# of f19112f (a plan that offloads compiles without Inductor's buffer pool). HF Llama's
# step peak under full checkpointing and at budgets 0.125 and 0.2 (planned on a CPU: 2.41
# GiB at both, against 2.93 before the change and full checkpointing's measured 2.66),
# what holds it there, then a slice of the GPU suite that covers the transfer ops'
# gradients and the measured peak.
#   OUT=dir bash benchmarks/results/2026-11-28_s36_cmd9.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader > "$OUT/gpu.txt"
python -c "import torch; print(torch.__version__)" >> "$OUT/gpu.txt"
timeout 240 python benchmarks/memory_peak.py --model benchmarks.zoo_models:llama --blocks lm.model.layers \
  --strategies full_ac,offload:0.125,offload:0.2 --top 12 --out "$OUT/m" > "$OUT/llama_peak.log" 2>&1
echo "llama rc $?" >> "$OUT/gpu.txt"
timeout 200 python -m pytest -q -m gpu -n 6 --dist load -rfEx -p no:cacheprovider tests \
  > "$OUT/gpu_suite.log" 2>&1
echo "gpu suite rc $?" >> "$OUT/gpu.txt"
grep -E "^== " "$OUT/llama_peak.log" | cut -c1-160
tail -n 5 "$OUT/llama_peak.log"
tail -n 3 "$OUT/gpu_suite.log"
cat "$OUT/gpu.txt"
