#!/usr/bin/env bash
# Session 30 (issue 18), command 1: each plan timed on two calls a step apart, the faster
# its measurement (17fe60f). ViT-B/16 inductor, sac, offload:auto, offload:0.5; HF Llama
# inductor, offload:auto. One H100, one run per row.
#   OUT=dir bash benchmarks/results/2026-11-27_s30_cmd1.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/gpu.txt
python -c "import torch; print(torch.__version__)" >> $OUT/gpu.txt
timeout 330 python benchmarks/zoo.py --models vit --strategies inductor,sac,offload:auto,offload:0.5 --steps 3 \
  --warmup 1 --timeout 120 --budget-seconds 310 --caches warm --out $OUT/zoo_vit > $OUT/zoo_vit.log 2>&1
timeout 230 python benchmarks/zoo.py --models llama --strategies inductor,offload:auto --steps 3 --warmup 1 \
  --timeout 110 --budget-seconds 210 --caches warm --out $OUT/zoo_llama > $OUT/zoo_llama.log 2>&1
grep -h -E 'measured graph|auto" measured|going back|keeping the faster|planning again|graph [0-9]+ runs again' \
  $OUT/zoo_vit/*/*.log $OUT/zoo_llama/*/*.log 2>/dev/null | cut -c1-700 > $OUT/replans.txt
tar czf $OUT/zoo.tgz -C $OUT zoo_vit zoo_llama && rm -rf $OUT/zoo_vit $OUT/zoo_llama
cut -c1-330 $OUT/replans.txt; tail -14 $OUT/zoo_vit.log; tail -12 $OUT/zoo_llama.log; cat $OUT/gpu.txt
