#!/usr/bin/env bash
# Session 32 (issue 18), command 3: HF Llama step by step under Inductor and "auto",
# now with the GPU's forward and backward time per step (2026-11-27_s32_host_probe.py)
# and the GPU's clocks and power sampled every 200 ms: is the steady state's 3 to 8%
# over the backend's timed calls (command 2) GPU time, and whose? Then the zoo's
# ViT-B/16 rows inductor and offload:auto.
#   OUT=dir bash benchmarks/results/2026-11-27_s32_cmd3.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/gpu.txt
python -c "import torch; print(torch.__version__)" >> $OUT/gpu.txt
P=benchmarks/results/2026-11-27_s32_host_probe.py
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv,noheader -lms 200 > $OUT/clocks.csv 2>&1 &
SMI=$!
timeout 110 python $P llama inductor 14 > $OUT/llama_inductor.log 2>&1
timeout 230 python $P llama '{"memory_budget": "auto"}' 18 > $OUT/llama_auto.log 2>&1
kill $SMI
timeout 200 python benchmarks/zoo.py --models vit --strategies inductor,offload:auto --steps 3 --warmup 1 \
  --timeout 110 --budget-seconds 190 --caches warm --out $OUT/zoo_vit > $OUT/zoo_vit.log 2>&1
grep -h -E 'measured graph|auto" measured|going back|keeping the faster|planning again|graph [0-9]+ runs again' \
  $OUT/zoo_vit/*/*.log 2>/dev/null | cut -c1-900 > $OUT/replans.txt
tar czf $OUT/zoo.tgz -C $OUT zoo_vit && rm -rf $OUT/zoo_vit
for f in llama_inductor llama_auto; do
  echo "== $f"; grep -E "^step|measured graph|going back|Error" $OUT/$f.log | cut -c1-150
done
awk -F', ' '{print $2, $4, $6}' $OUT/clocks.csv | sort | uniq -c | sort -rn | head -8
cut -c1-500 $OUT/replans.txt; tail -7 $OUT/zoo_vit.log; cat $OUT/gpu.txt
