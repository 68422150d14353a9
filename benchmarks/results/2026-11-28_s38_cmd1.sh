#!/usr/bin/env bash
# Session 38 (issue 18), command 1: the recorder measures the GPU work queued ahead of
# each phase (an idle stream's event; GPU test), and the simulator gives the host that
# head start (Corrections.queued_ms). ResNet-50 interleaved as session 37's command 4,
# now with each strategy's activation memory: is the re-plan's prediction within 5%?
#   OUT=dir bash benchmarks/results/2026-11-28_s38_cmd1.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader > "$OUT/gpu.txt"
python -c "import torch; print(torch.__version__)" >> "$OUT/gpu.txt"
timeout 60 python -m pytest -q -s -m gpu tests/test_gpu.py -k queued > "$OUT/test.log" 2>&1
echo "test rc $?" >> "$OUT/gpu.txt"
grep -E "queued|passed|failed|Error" "$OUT/test.log" | tail -5
timeout 420 python benchmarks/interleaved.py --model benchmarks/zoo_models.py:resnet50 --dtype float32 \
  --strategies inductor,offload:none,offload:auto --rounds 10 --steps 8 \
  --json "$OUT/resnet50.json" > "$OUT/resnet50.log" 2>&1
echo "resnet50 rc $?" >> "$OUT/gpu.txt"
grep -h -E 'measured graph|auto" measured|going back|keeping the faster|planning again|runs again' \
  "$OUT/resnet50.log" | cut -c1-900
tail -n 14 "$OUT/resnet50.log"
cat "$OUT/gpu.txt"
