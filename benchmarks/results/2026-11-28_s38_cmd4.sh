#!/usr/bin/env bash
# Session 38 (issue 18), command 4: where the host's time goes in ResNet-50's step with
# nothing moved and with an offload plan (budget 0.75, no re-plan): cProfile, top
# functions by own time (interleaved.py --host-profile).
#   OUT=dir bash benchmarks/results/2026-11-28_s38_cmd4.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader > "$OUT/gpu.txt"
python -c "import torch; print(torch.__version__)" >> "$OUT/gpu.txt"
timeout 400 python benchmarks/interleaved.py --model benchmarks/zoo_models.py:resnet50 --dtype float32 \
  --strategies offload:none,offload:0.75 --offload-options '{"replan": false}' --rounds 3 --steps 8 \
  --host-profile 10 > "$OUT/profile.log" 2>&1
echo "profile rc $?" >> "$OUT/gpu.txt"
grep -A24 -E "^--- offload" "$OUT/profile.log" | cut -c1-160
tail -n 5 "$OUT/profile.log"
cat "$OUT/gpu.txt"
