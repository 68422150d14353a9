#!/usr/bin/env bash
# Session 42 (issue 18), command 3: ResNet-50 (Inductor, "auto") interleaved, with
# recomputation fitted apart from the backward's other kernels where "auto"'s re-plan
# offloaded nothing and measured past max_overhead (planning.judging.recompute_fitted).
#   OUT=dir bash benchmarks/results/2026-11-28_s42_cmd3.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader > "$OUT/gpu.txt"
python -c "import torch; print(torch.__version__)" >> "$OUT/gpu.txt"
timeout 280 python benchmarks/interleaved.py --model benchmarks/zoo_models.py:resnet50 --dtype float32 \
  --strategies inductor,offload:auto --rounds 8 --steps 8 --json "$OUT/resnet50.json" > "$OUT/resnet50.log" 2>&1
echo "resnet50 rc $?" >> "$OUT/gpu.txt"
grep -h -E 'measured|planning again|planning once|going back|keeping|runs again|judged| recomputed, ' "$OUT/resnet50.log" \
  | cut -c1-330
tail -n 5 "$OUT/resnet50.log"
cat "$OUT/gpu.txt"
