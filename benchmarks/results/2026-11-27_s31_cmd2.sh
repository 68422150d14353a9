#!/usr/bin/env bash
# Session 31 (issue 18), command 2: the transfer ops' host time, op by op and piece by
# piece (2026-11-27_s31_op_host.py); ViT-B/16 under Inductor with every step printed
# (does Inductor's forward show the same two host speeds as "auto"'s?); the zoo's HF
# Llama rows inductor and offload:auto with attention given a mask priced apart (4056074).
#   OUT=dir bash benchmarks/results/2026-11-27_s31_cmd2.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/gpu.txt
python -c "import torch; print(torch.__version__)" >> $OUT/gpu.txt
timeout 60 python benchmarks/results/2026-11-27_s31_op_host.py > $OUT/op_host.log 2>&1
timeout 70 python benchmarks/results/2026-11-27_s31_step_probe.py vit inductor 24 > $OUT/vit_inductor.log 2>&1
timeout 250 python benchmarks/zoo.py --models llama --strategies inductor,offload:auto --steps 3 --warmup 1 \
  --timeout 120 --budget-seconds 230 --caches warm --out $OUT/zoo_llama > $OUT/zoo_llama.log 2>&1
grep -h -E 'measured graph|auto" measured|going back|keeping the faster|planning again|graph [0-9]+ runs again' \
  $OUT/zoo_llama/*/*.log 2>/dev/null | cut -c1-900 > $OUT/replans.txt
tar czf $OUT/zoo.tgz -C $OUT zoo_llama && rm -rf $OUT/zoo_llama
cat $OUT/op_host.log | tail -30
grep -E "^step" $OUT/vit_inductor.log | cut -c1-120
cut -c1-600 $OUT/replans.txt; tail -12 $OUT/zoo_llama.log; cat $OUT/gpu.txt
