#!/usr/bin/env bash
# Session 31 (issue 18), command 1: the GPU suite (the calibration test now checks the
# masked-attention rates, 4056074), then ViT-B/16 and ResNet-50 at "auto" with every step
# printed (2026-11-27_s31_step_probe.py), measured as the backend does (warm-up 1) and
# with the measurement put 8 backward passes after each compile.
#   OUT=dir bash benchmarks/results/2026-11-27_s31_cmd1.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/gpu.txt
python -c "import torch; print(torch.__version__)" >> $OUT/gpu.txt
P=benchmarks/results/2026-11-27_s31_step_probe.py
A='{"memory_budget": "auto"}'
timeout 260 python -m pytest -q -m gpu -n 6 --dist load -rfEx -p no:cacheprovider tests > $OUT/suite.log 2>&1
timeout 90 python $P vit "$A" 16 > $OUT/vit_w1.log 2>&1
timeout 110 python $P vit "$A" 30 8 > $OUT/vit_w8.log 2>&1
timeout 100 python $P resnet50 "$A" 30 8 > $OUT/resnet_w8.log 2>&1
tail -5 $OUT/suite.log | cut -c1-300
for f in vit_w1 vit_w8 resnet_w8; do
  echo "== $f"; grep -E "^step|measured graph|graph [0-9]+: step|Error|going back" $OUT/$f.log | cut -c1-260
done
cat $OUT/gpu.txt
