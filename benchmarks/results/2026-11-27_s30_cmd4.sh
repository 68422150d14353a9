#!/usr/bin/env bash
# Session 30 (issue 18), command 4: HF Llama around a forced give-up of its re-plan
# (2026-11-27_s30_revert_probe.py), then the zoo's ResNet-50 and GPT h100 preset rows
# inductor and offload:auto (not run since session 27).
#   OUT=dir bash benchmarks/results/2026-11-27_s30_cmd4.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/gpu.txt
timeout 120 python benchmarks/results/2026-11-27_s30_revert_probe.py 18 > $OUT/revert.log 2>&1
timeout 190 python benchmarks/zoo.py --models resnet50 --strategies inductor,offload:auto --steps 3 --warmup 1 \
  --timeout 120 --budget-seconds 180 --caches warm --out $OUT/zoo_resnet > $OUT/zoo_resnet.log 2>&1
timeout 140 python benchmarks/zoo.py --models gpt --strategies inductor,offload:auto --steps 3 --warmup 1 \
  --timeout 100 --budget-seconds 130 --caches warm --out $OUT/zoo_gpt > $OUT/zoo_gpt.log 2>&1
grep -h -E 'measured graph|auto" measured|going back|planning again|graph [0-9]+ runs again' \
  $OUT/zoo_resnet/*/*.log $OUT/zoo_gpt/*/*.log 2>/dev/null | cut -c1-700 > $OUT/replans.txt
tar czf $OUT/zoo.tgz -C $OUT zoo_resnet zoo_gpt && rm -rf $OUT/zoo_resnet $OUT/zoo_gpt
grep -E "^step|Error" $OUT/revert.log | cut -c1-160; cut -c1-250 $OUT/replans.txt
tail -9 $OUT/zoo_resnet.log | cut -c1-250; tail -9 $OUT/zoo_gpt.log | cut -c1-250; cat $OUT/gpu.txt
