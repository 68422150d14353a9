#!/usr/bin/env bash
# Session 31 (issue 18), command 4: at the first fit, a phase the host paced takes the
# other phase's kernel scale within its own measured compute (planning/replan.corrected).
# The zoo's ViT-B/16 and ResNet-50 rows inductor and offload:auto.
#   OUT=dir bash benchmarks/results/2026-11-27_s31_cmd4.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/gpu.txt
python -c "import torch; print(torch.__version__)" >> $OUT/gpu.txt
timeout 170 python benchmarks/zoo.py --models vit --strategies inductor,offload:auto --steps 3 --warmup 1 \
  --timeout 100 --budget-seconds 160 --caches warm --out $OUT/zoo_vit > $OUT/zoo_vit.log 2>&1
timeout 220 python benchmarks/zoo.py --models resnet50 --strategies inductor,offload:auto --steps 3 --warmup 1 \
  --timeout 120 --budget-seconds 210 --caches warm --out $OUT/zoo_resnet > $OUT/zoo_resnet.log 2>&1
grep -h -E 'measured graph|auto" measured|going back|keeping the faster|planning again|graph [0-9]+ runs again' \
  $OUT/zoo_vit/*/*.log $OUT/zoo_resnet/*/*.log 2>/dev/null | cut -c1-900 > $OUT/replans.txt
tar czf $OUT/zoo.tgz -C $OUT zoo_vit zoo_resnet && rm -rf $OUT/zoo_vit $OUT/zoo_resnet
cut -c1-420 $OUT/replans.txt; tail -9 $OUT/zoo_vit.log; tail -9 $OUT/zoo_resnet.log; cat $OUT/gpu.txt
