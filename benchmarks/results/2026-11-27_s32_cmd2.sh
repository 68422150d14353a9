#!/usr/bin/env bash
# Session 32 (issue 18), command 2: HF Llama "auto" step by step with the host probe
# (2026-11-27_s32_host_probe.py): does the zoo's 5% over the backend's timed calls
# (session 31) show in every step after the re-plan, or in some? Then the zoo's
# ResNet-50 rows inductor and offload:auto with convolutions priced at calibrated rates
# (991adb2) and the paced phase's halfway first fit (11627c7), both first run on a GPU.
#   OUT=dir bash benchmarks/results/2026-11-27_s32_cmd2.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/gpu.txt
python -c "import torch; print(torch.__version__)" >> $OUT/gpu.txt
timeout 230 python benchmarks/results/2026-11-27_s32_host_probe.py llama '{"memory_budget": "auto"}' 16 \
  > $OUT/llama_auto.log 2>&1
timeout 230 python benchmarks/zoo.py --models resnet50 --strategies inductor,offload:auto --steps 3 --warmup 1 \
  --timeout 120 --budget-seconds 220 --caches warm --out $OUT/zoo_resnet > $OUT/zoo_resnet.log 2>&1
grep -h -E 'calibrat|measured graph|auto" measured|going back|keeping the faster|planning again|graph [0-9]+ runs again' \
  $OUT/zoo_resnet/*/*.log 2>/dev/null | cut -c1-900 > $OUT/replans.txt
tar czf $OUT/zoo.tgz -C $OUT zoo_resnet && rm -rf $OUT/zoo_resnet
grep -E "^step|measured graph|planning again|auto\" measured|going back|Error" $OUT/llama_auto.log | cut -c1-420
cut -c1-700 $OUT/replans.txt; tail -8 $OUT/zoo_resnet.log; cat $OUT/gpu.txt
