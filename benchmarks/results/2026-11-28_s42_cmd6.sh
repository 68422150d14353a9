#!/usr/bin/env bash
# Session 42 (issue 18), command 6: ViT-B/16 (Inductor, "auto") interleaved, with a plan
# measured well within max_overhead whose recomputations cost less than priced planned
# once more with them priced as measured (planning.judging.cheaper_recomputation).
#   OUT=dir bash benchmarks/results/2026-11-28_s42_cmd6.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader > "$OUT/gpu.txt"
python -c "import torch; print(torch.__version__)" >> "$OUT/gpu.txt"
timeout 185 python benchmarks/interleaved.py --model benchmarks/zoo_models.py:vit --dtype float32 \
  --strategies inductor,offload:auto --rounds 4 --steps 6 --json "$OUT/vit.json" > "$OUT/vit.log" 2>&1
echo "vit rc $?" >> "$OUT/gpu.txt"
grep -h -E 'measured|planning again|planning once|going back|keeping|runs again| recomputed, ' "$OUT/vit.log" | cut -c1-330
tail -n 5 "$OUT/vit.log"
cat "$OUT/gpu.txt"
