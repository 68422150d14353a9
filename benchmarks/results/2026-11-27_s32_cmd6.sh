#!/usr/bin/env bash
# Session 32 (issue 18), command 6: the example GPT's h100 preset (the issue: it keeps its
# figures) and ResNet-50 again (command 4's host-paced timings spread 17%), rows inductor
# and offload:auto, with a plan's measurement the median of three timed calls.
#   OUT=dir bash benchmarks/results/2026-11-27_s32_cmd6.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/gpu.txt
python -c "import torch; print(torch.__version__)" >> $OUT/gpu.txt
timeout 220 python benchmarks/zoo.py --models gpt --strategies inductor,offload:auto --steps 3 --warmup 1 \
  --timeout 150 --budget-seconds 210 --caches warm --out $OUT/zoo_gpt > $OUT/zoo_gpt.log 2>&1
timeout 320 python benchmarks/zoo.py --models resnet50 --strategies inductor,offload:auto --steps 3 --warmup 1 \
  --timeout 170 --budget-seconds 310 --caches warm --out $OUT/zoo_resnet > $OUT/zoo_resnet.log 2>&1
grep -h -E 'measured graph|auto" measured|going back|keeping the faster|planning again|graph [0-9]+ runs again' \
  $OUT/zoo_gpt/*/*.log $OUT/zoo_resnet/*/*.log 2>/dev/null | cut -c1-900 > $OUT/replans.txt
tar czf $OUT/zoo.tgz -C $OUT zoo_gpt zoo_resnet && rm -rf $OUT/zoo_gpt $OUT/zoo_resnet
cut -c1-420 $OUT/replans.txt; tail -7 $OUT/zoo_gpt.log; tail -7 $OUT/zoo_resnet.log; cat $OUT/gpu.txt
