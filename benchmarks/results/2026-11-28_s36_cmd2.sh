#!/usr/bin/env bash
# Session 36 (issue 18), command 2: what holds HF Llama's memory at the step's peak under
# full checkpointing and under the backend at an activation budget of 0.125 (whose step
# peak measured 150 MiB over full checkpointing's in session 35), from the CUDA caching
# allocator's history (benchmarks/memory_peak.py).
#   OUT=dir bash benchmarks/results/2026-11-28_s36_cmd2.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader > "$OUT/gpu.txt"
python -c "import torch; print(torch.__version__)" >> "$OUT/gpu.txt"
timeout 330 python benchmarks/memory_peak.py --model benchmarks.zoo_models:llama --blocks lm.model.layers \
  --strategies full_ac,offload:0.125 --top 25 --out "$OUT/m" > "$OUT/llama_peak.log" 2>&1
echo "llama rc $?" >> "$OUT/gpu.txt"
grep -v "^\s*$" "$OUT/llama_peak.log" | grep -v Warning | cut -c1-250 | tail -70
cat "$OUT/gpu.txt"
