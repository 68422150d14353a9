#!/usr/bin/env bash
# Session 30 (issue 18), command 3: profiles of settled steps of HF Llama and ViT-B/16 at
# "auto" and under Inductor (2026-11-27_s30_profile_probe.py), traces gzipped under $OUT.
#   OUT=dir bash benchmarks/results/2026-11-27_s30_cmd3.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
P=benchmarks/results/2026-11-27_s30_profile_probe.py
timeout 150 python $P llama '{"memory_budget": "auto"}' 14 $OUT/llama_auto.json > $OUT/llama_auto.log 2>&1
timeout 75 python $P llama inductor 3 $OUT/llama_inductor.json > $OUT/llama_inductor.log 2>&1
timeout 110 python $P vit '{"memory_budget": "auto"}' 14 $OUT/vit_auto.json > $OUT/vit_auto.log 2>&1
timeout 60 python $P vit inductor 3 $OUT/vit_inductor.json > $OUT/vit_inductor.log 2>&1
gzip -f $OUT/*.json
for f in llama_auto llama_inductor vit_auto vit_inductor; do
  echo "== $f"; grep -E "walls|Error" $OUT/$f.log | cut -c1-200
done
