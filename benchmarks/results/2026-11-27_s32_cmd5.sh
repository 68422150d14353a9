#!/usr/bin/env bash
# Session 32 (issue 18), command 5: the three GPU tests command 4 failed, mended; then the
# zoo's ViT-B/16 and HF Llama rows inductor and offload:auto with a plan's measurement
# the median of three timed calls.
#   OUT=dir bash benchmarks/results/2026-11-27_s32_cmd5.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/gpu.txt
python -c "import torch; print(torch.__version__)" >> $OUT/gpu.txt
timeout 100 python -m pytest -q -m gpu -n 3 -rfEx -p no:cacheprovider tests/test_gpu.py -k \
  "allocator_and_names or max_memory_allocated_reads or memory_limit_holds" > $OUT/suite.log 2>&1
timeout 190 python benchmarks/zoo.py --models vit --strategies inductor,offload:auto --steps 3 --warmup 1 \
  --timeout 110 --budget-seconds 180 --caches warm --out $OUT/zoo_vit > $OUT/zoo_vit.log 2>&1
timeout 250 python benchmarks/zoo.py --models llama --strategies inductor,offload:auto --steps 3 --warmup 1 \
  --timeout 140 --budget-seconds 240 --caches warm --out $OUT/zoo_llama > $OUT/zoo_llama.log 2>&1
grep -h -E 'measured graph|auto" measured|going back|keeping the faster|planning again|graph [0-9]+ runs again' \
  $OUT/zoo_vit/*/*.log $OUT/zoo_llama/*/*.log 2>/dev/null | cut -c1-900 > $OUT/replans.txt
tar czf $OUT/zoo.tgz -C $OUT zoo_vit zoo_llama && rm -rf $OUT/zoo_vit $OUT/zoo_llama
tail -3 $OUT/suite.log | cut -c1-300
cut -c1-420 $OUT/replans.txt; tail -7 $OUT/zoo_vit.log; tail -7 $OUT/zoo_llama.log; cat $OUT/gpu.txt
