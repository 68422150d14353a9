#!/usr/bin/env bash
# Session 41 (issue 18), command 4: ViT-B/16 interleaved (Inductor, SAC of model.blocks,
# "auto"); command 2's ViT run stopped at its arguments (no --blocks for SAC).
#   OUT=dir bash benchmarks/results/2026-11-28_s41_cmd4.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader > "$OUT/gpu.txt"
python -c "import torch; print(torch.__version__)" >> "$OUT/gpu.txt"
timeout 300 python benchmarks/interleaved.py --model benchmarks/zoo_models.py:vit --dtype float32 \
  --blocks model.blocks --strategies inductor,sac,offload:auto --rounds 8 --steps 8 \
  --json "$OUT/vit.json" > "$OUT/vit.log" 2>&1
echo "vit rc $?" >> "$OUT/gpu.txt"
grep -h -E 'nothing moved, measured|offload: measured|auto" measured|going back|keeping|planning again|planning once|runs again|still differs|offloaded' \
  "$OUT/vit.log" | cut -c1-400
tail -n 6 "$OUT/vit.log" | head -n 5
cat "$OUT/gpu.txt"
