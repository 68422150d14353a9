#!/usr/bin/env bash
# Session 39 (issue 18), command 1: a graph with transfer ops keeps Inductor's buffer pool,
# planned on device memory only (lowering.device_peak). The new GPU test; ResNet-50
# interleaved (Inductor, nothing moved, "auto": the host's allocations and the step);
# HF Llama's step peak at budgets 0.125 and 0.2 (2.20 and 2.26 GiB without the pool,
# session 37; 2.81-2.87 with Inductor's own estimate, sessions 35-36).
#   OUT=dir bash benchmarks/results/2026-11-28_s39_cmd1.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader > "$OUT/gpu.txt"
python -c "import torch; print(torch.__version__)" >> "$OUT/gpu.txt"
timeout 90 python -m pytest -q -m gpu -rfEx -p no:cacheprovider tests/test_graph.py > "$OUT/test.log" 2>&1
echo "test rc $?" >> "$OUT/gpu.txt"
timeout 200 python benchmarks/interleaved.py --model benchmarks/zoo_models.py:resnet50 --dtype float32 \
  --strategies inductor,offload:none,offload:auto --rounds 10 --steps 8 \
  --json "$OUT/resnet50.json" > "$OUT/resnet50.log" 2>&1
echo "resnet50 rc $?" >> "$OUT/gpu.txt"
timeout 240 python benchmarks/memory_peak.py --model benchmarks.zoo_models:llama --blocks lm.model.layers \
  --strategies offload:0.125,offload:0.2 --top 12 --out "$OUT/m" > "$OUT/llama_peak.log" 2>&1
echo "llama rc $?" >> "$OUT/gpu.txt"
tail -n 3 "$OUT/test.log"
grep -h -E 'measured graph|auto" measured|going back|keeping the faster|planning again|runs again|still differs' \
  "$OUT/resnet50.log" | cut -c1-520
tail -n 6 "$OUT/resnet50.log" | head -n 4
grep -E "^== " "$OUT/llama_peak.log" | cut -c1-200
tail -n 6 "$OUT/llama_peak.log"
cat "$OUT/gpu.txt"
