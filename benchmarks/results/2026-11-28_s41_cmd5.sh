#!/usr/bin/env bash
# Session 41 (issue 18), command 5: against the measured step with nothing moved, each plan
# at its own host's pace; a re-plan that offloaded with its host pacing a phase is planned
# once more recomputing only (planning.judging.once_more). The GPU suite, then ViT-B/16
# (Inductor, SAC, "auto") and ResNet-50 (Inductor, "auto") interleaved.
#   OUT=dir bash benchmarks/results/2026-11-28_s41_cmd5.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader > "$OUT/gpu.txt"
python -c "import torch; print(torch.__version__)" >> "$OUT/gpu.txt"
timeout 170 python -m pytest -q -m gpu -n 6 --dist load -rfEx -p no:cacheprovider --durations=5 tests \
  > "$OUT/gpu_suite.log" 2>&1
echo "gpu suite rc $?" >> "$OUT/gpu.txt"
for m in vit:inductor,sac,offload:auto resnet50:inductor,offload:auto; do
  name=${m%%:*}; blocks=""
  [ "$name" = vit ] && blocks="--blocks model.blocks"
  timeout 190 python benchmarks/interleaved.py --model benchmarks/zoo_models.py:$name --dtype float32 $blocks \
    --strategies ${m#*:} --rounds 8 --steps 8 --json "$OUT/$name.json" > "$OUT/$name.log" 2>&1
  echo "$name rc $?" >> "$OUT/gpu.txt"
  grep -h -E 'nothing moved, measured|offload: measured|auto" measured|going back|keeping|planning again|planning once|runs again|still differs|offloaded' \
    "$OUT/$name.log" | cut -c1-260
  tail -n 6 "$OUT/$name.log" | head -n 5
done
tail -n 3 "$OUT/gpu_suite.log"
cat "$OUT/gpu.txt"
