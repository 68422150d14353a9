#!/usr/bin/env bash
# Session 43 (issue 18), command 4: HF Llama (Inductor, "auto") interleaved, not run since
# session 41 (command 3 passed --blocks without a checkpointing strategy, which interleaved.py refuses).
#   OUT=dir bash benchmarks/results/2026-11-28_s43_cmd4.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader > "$OUT/gpu.txt"
python -c "import torch; print(torch.__version__)" >> "$OUT/gpu.txt"
PAT='offload: measured|auto" measured|going back|keeping|planning again|planning once|runs again|still differs|offloaded \('
timeout 430 python benchmarks/interleaved.py --model benchmarks/zoo_models.py:llama --dtype bfloat16 \
  --strategies inductor,offload:auto --rounds 3 --steps 6 --json "$OUT/llama.json" > "$OUT/llama.log" 2>&1
echo "llama rc $?" >> "$OUT/gpu.txt"
grep -h -E "$PAT" "$OUT/llama.log" | cut -c1-420
tail -n 5 "$OUT/llama.log" | head -n 3
cat "$OUT/gpu.txt"
