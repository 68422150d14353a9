#!/usr/bin/env bash
# Session 40 (issue 18), command 4: the GPU suite at the session's code, then ViT-B/16
# interleaved (inductor, nothing moved, "auto").
#   OUT=dir bash benchmarks/results/2026-11-28_s40_cmd4.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader > "$OUT/gpu.txt"
python -c "import torch; print(torch.__version__)" >> "$OUT/gpu.txt"
timeout 220 python -m pytest -q -m gpu -n 6 --dist load -rfEx -p no:cacheprovider --durations=5 tests \
  > "$OUT/gpu_suite.log" 2>&1
echo "gpu suite rc $?" >> "$OUT/gpu.txt"
timeout 330 python benchmarks/interleaved.py --model benchmarks/zoo_models.py:vit --dtype float32 \
  --strategies inductor,offload:none,offload:auto --rounds 10 --steps 8 \
  --json "$OUT/vit.json" > "$OUT/vit.log" 2>&1
echo "vit rc $?" >> "$OUT/gpu.txt"
grep -h -E 'offload: measured|auto" measured|going back|keeping the faster|planning again|runs again|still differs|offloaded' \
  "$OUT/vit.log" | cut -c1-300
tail -n 6 "$OUT/vit.log" | head -n 5
tail -n 3 "$OUT/gpu_suite.log"
cat "$OUT/gpu.txt"
