#!/usr/bin/env bash
# Session 29 (issue 18), command 1: "auto" holding max_overhead as measured (a re-plan
# measured past it gives way to the faster plan it replaced). HF Llama inductor, sac,
# offload:auto; ViT-B/16 inductor, offload:auto; then the GPU tests of measurement and
# re-planning. One H100, warm Inductor caches.
#   OUT=dir bash benchmarks/results/2026-11-27_s29_cmd1.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/gpu.txt
python -c "import torch; print(torch.__version__)" >> $OUT/gpu.txt
timeout 250 python benchmarks/zoo.py --models llama --strategies inductor,sac,offload:auto --steps 3 --warmup 1 \
  --timeout 110 --budget-seconds 230 --caches warm --out $OUT/zoo > $OUT/zoo_llama.log 2>&1
timeout 160 python benchmarks/zoo.py --models vit --strategies inductor,offload:auto --steps 3 --warmup 1 \
  --timeout 100 --budget-seconds 140 --caches warm --out $OUT/zoo_vit > $OUT/zoo_vit.log 2>&1
timeout 60 python -m pytest -q -m gpu -rfEx -p no:cacheprovider tests/test_gpu.py \
  -k "measurement or memory_limit or timed_call or parity" > $OUT/suite.log 2>&1
grep -h -E 'auto" measured|going back|keeping the faster|planning again|measured graph' \
  $OUT/zoo/*/*.log $OUT/zoo_vit/*/*.log 2>/dev/null | cut -c1-400 > $OUT/replans.txt
tar czf $OUT/zoo.tgz -C $OUT zoo zoo_vit && rm -rf $OUT/zoo $OUT/zoo_vit
tail -3 $OUT/suite.log; cat $OUT/replans.txt | cut -c1-250; tail -25 $OUT/zoo_llama.log; tail -20 $OUT/zoo_vit.log
