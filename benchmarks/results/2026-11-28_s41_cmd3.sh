#!/usr/bin/env bash
# Session 41 (issue 18), command 3: HF Llama (8 layers, batch 4 x 4096, bf16) interleaved:
# Inductor, SAC and "auto" (whose first plan now moves nothing and is the measured step
# max_overhead is held against).
#   OUT=dir bash benchmarks/results/2026-11-28_s41_cmd3.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader > "$OUT/gpu.txt"
python -c "import torch; print(torch.__version__)" >> "$OUT/gpu.txt"
timeout 540 python benchmarks/interleaved.py --model benchmarks/zoo_models.py:llama --dtype bfloat16 \
  --blocks lm.model.layers --strategies inductor,sac,offload:auto --rounds 6 --steps 6 \
  --json "$OUT/llama.json" > "$OUT/llama.log" 2>&1
echo "llama rc $?" >> "$OUT/gpu.txt"
grep -h -E 'nothing moved, measured|offload: measured|auto" measured|going back|keeping|planning again|planning once|runs again|still differs|offloaded' \
  "$OUT/llama.log" | cut -c1-700
tail -n 6 "$OUT/llama.log" | head -n 5
cat "$OUT/gpu.txt"
