#!/usr/bin/env bash
# Session 37 (issue 18), command 4: ResNet-50 (host-bound) with Inductor, the backend with
# nothing moved and "auto", interleaved in rotated rounds, as session 36's command 1, now
# that a plan with transfer ops compiles without Inductor's buffer pool (f19112f): does
# the pool's absence cost a host-bound model's "auto" step?
#   OUT=dir bash benchmarks/results/2026-11-28_s37_cmd4.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader > "$OUT/gpu.txt"
python -c "import torch; print(torch.__version__)" >> "$OUT/gpu.txt"
timeout 420 python benchmarks/interleaved.py --model benchmarks/zoo_models.py:resnet50 --dtype float32 \
  --strategies inductor,offload:none,offload:auto --rounds 10 --steps 8 \
  --json "$OUT/resnet50.json" > "$OUT/resnet50.log" 2>&1
echo "resnet50 rc $?" >> "$OUT/gpu.txt"
grep -h -E 'measured graph|auto" measured|going back|keeping the faster|planning again|runs again' \
  "$OUT/resnet50.log" | cut -c1-600
tail -n 12 "$OUT/resnet50.log"
cat "$OUT/gpu.txt"
