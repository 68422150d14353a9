#!/usr/bin/env bash
# Session 32 (issue 18), command 4: the GPU suite with a plan's measurement the median of
# three timed calls (measure.typical), then the zoo's ResNet-50 rows inductor and
# offload:auto (convolutions priced at calibrated rates, 991adb2; the paced phase's
# halfway first fit, 11627c7; the median timing), with the row's time limit raised to
# 170 s (command 2's 120 s ran out: two compiles and a calibration on a fresh machine).
#   OUT=dir bash benchmarks/results/2026-11-27_s32_cmd4.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/gpu.txt
python -c "import torch; print(torch.__version__)" >> $OUT/gpu.txt
timeout 250 python -m pytest -q -m gpu -n 6 --dist load -rfEx -p no:cacheprovider tests > $OUT/suite.log 2>&1
timeout 320 python benchmarks/zoo.py --models resnet50 --strategies inductor,offload:auto --steps 3 --warmup 1 \
  --timeout 170 --budget-seconds 310 --caches warm --out $OUT/zoo_resnet > $OUT/zoo_resnet.log 2>&1
grep -h -E 'calibrated|measured graph|auto" measured|going back|keeping the faster|planning again|graph [0-9]+ runs again' \
  $OUT/zoo_resnet/*/*.log 2>/dev/null | cut -c1-900 > $OUT/replans.txt
tar czf $OUT/zoo.tgz -C $OUT zoo_resnet && rm -rf $OUT/zoo_resnet
tail -4 $OUT/suite.log | cut -c1-300
cut -c1-700 $OUT/replans.txt; tail -8 $OUT/zoo_resnet.log; cat $OUT/gpu.txt
