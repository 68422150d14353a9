#!/usr/bin/env bash
# Session 43 (issue 18), command 5: the example GPT's h100 preset (Inductor, SAC, "auto")
# interleaved, not run since session 38.
#   OUT=dir bash benchmarks/results/2026-11-28_s43_cmd5.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader > "$OUT/gpu.txt"
python -c "import torch; print(torch.__version__)" >> "$OUT/gpu.txt"
PAT='offload: measured|auto" measured|going back|keeping|planning again|planning once|runs again|still differs|offloaded \('
timeout 400 python benchmarks/interleaved.py --model benchmarks/zoo_models.py:gpt --dtype bfloat16 --blocks blocks \
  --strategies inductor,sac,offload:auto --rounds 3 --steps 6 --json "$OUT/gpt.json" > "$OUT/gpt.log" 2>&1
echo "gpt rc $?" >> "$OUT/gpu.txt"
grep -h -E "$PAT" "$OUT/gpt.log" | cut -c1-420
tail -n 6 "$OUT/gpt.log" | head -n 4
cat "$OUT/gpu.txt"
