#!/usr/bin/env bash
# Session 36 (issue 18), command 1: ResNet-50 and ViT-B/16 with Inductor, the backend with
# nothing moved and "auto" compiled in one process and timed in rotated rounds
# (benchmarks/interleaved.py): is "auto" within 1.03x of Inductor's step once the host's
# drift is paired out, and is the backend's nothing-moved graph slower than Inductor's
# own? Then 20 synchronised steps of each under cProfile: where does the host spend a step?
#   OUT=dir bash benchmarks/results/2026-11-28_s36_cmd1.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader > "$OUT/gpu.txt"
python -c "import torch; print(torch.__version__)" >> "$OUT/gpu.txt"
timeout 330 python benchmarks/interleaved.py --model benchmarks/zoo_models.py:resnet50 --dtype float32 \
  --strategies inductor,offload:none,offload:auto --rounds 10 --steps 8 --host-profile 20 \
  --json "$OUT/resnet50.json" > "$OUT/resnet50.log" 2>&1
echo "resnet50 rc $?" >> "$OUT/gpu.txt"
timeout 230 python benchmarks/interleaved.py --model benchmarks/zoo_models.py:vit --dtype float32 \
  --strategies inductor,offload:none,offload:auto --rounds 10 --steps 8 \
  --json "$OUT/vit.json" > "$OUT/vit.log" 2>&1
echo "vit rc $?" >> "$OUT/gpu.txt"
grep -h -E 'measured graph|auto" measured|going back|keeping the faster|planning again|runs again' \
  "$OUT"/resnet50.log "$OUT"/vit.log | cut -c1-600 > "$OUT/replans.txt"
cut -c1-300 "$OUT/replans.txt"
tail -n 8 "$OUT/resnet50.log" "$OUT/vit.log"
cat "$OUT/gpu.txt"
