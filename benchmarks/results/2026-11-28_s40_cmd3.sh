#!/usr/bin/env bash
# Session 40 (issue 18), command 3: ResNet-50 interleaved at the session's code: the
# host block's own events, and "auto" planned once more within max_overhead less what
# its re-plan missed by (planning.judging.tightened).
#   OUT=dir bash benchmarks/results/2026-11-28_s40_cmd3.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader > "$OUT/gpu.txt"
python -c "import torch; print(torch.__version__)" >> "$OUT/gpu.txt"
timeout 420 python benchmarks/interleaved.py --model benchmarks/zoo_models.py:resnet50 --dtype float32 \
  --strategies inductor,offload:none,offload:auto --rounds 10 --steps 8 \
  --json "$OUT/resnet50.json" > "$OUT/resnet50.log" 2>&1
echo "resnet50 rc $?" >> "$OUT/gpu.txt"
grep -h -E 'offload: measured|auto" measured|going back|keeping the faster|planning again|runs again|still differs|offloaded' \
  "$OUT/resnet50.log" | cut -c1-420
tail -n 6 "$OUT/resnet50.log" | head -n 5
cat "$OUT/gpu.txt"
