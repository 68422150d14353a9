#!/usr/bin/env bash
# Session 38 (issue 18), command 6: the head start per phase, bounded by what the step
# leaves queued (the commit after 75de11c): the queued-work GPU test, then ViT-B/16 and
# ResNet-50 interleaved (Inductor, nothing moved, "auto") with activation memory.
#   OUT=dir bash benchmarks/results/2026-11-28_s38_cmd6.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader > "$OUT/gpu.txt"
python -c "import torch; print(torch.__version__)" >> "$OUT/gpu.txt"
timeout 60 python -m pytest -q -s -m gpu tests/test_gpu.py -k queued > "$OUT/test.log" 2>&1
echo "test rc $?" >> "$OUT/gpu.txt"
grep -E "queued|passed|failed" "$OUT/test.log" | tail -3
for m in vit resnet50; do
  timeout 200 python benchmarks/interleaved.py --model benchmarks/zoo_models.py:$m --dtype float32 \
    --strategies inductor,offload:none,offload:auto --rounds 10 --steps 8 \
    --json "$OUT/$m.json" > "$OUT/$m.log" 2>&1
  echo "$m rc $?" >> "$OUT/gpu.txt"
  grep -h -E 'measured graph|auto" measured|going back|keeping the faster|planning again|runs again|still differs' \
    "$OUT/$m.log" | cut -c1-520
  tail -n 6 "$OUT/$m.log" | head -n 4
done
cat "$OUT/gpu.txt"
