#!/usr/bin/env bash
# Session 30 (issue 18), command 2: every step of HF Llama and ViT-B/16 at "auto" and
# under Inductor, with host times, collections and the plan in force
# (2026-11-27_s30_step_probe.py): why command 1's Llama "auto" row measured 152 ms after
# going back to its first plan (measured 130.6 ms), and why ViT-B/16's first plans were
# timed with the host twice as slow as their re-plans.
#   OUT=dir bash benchmarks/results/2026-11-27_s30_cmd2.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
P=benchmarks/results/2026-11-27_s30_step_probe.py
timeout 170 python $P llama '{"memory_budget": "auto"}' 18 > $OUT/llama_auto.log 2>&1
timeout 80 python $P llama inductor 8 > $OUT/llama_inductor.log 2>&1
timeout 130 python $P vit '{"memory_budget": "auto"}' 18 > $OUT/vit_auto.log 2>&1
timeout 70 python $P vit inductor 8 > $OUT/vit_inductor.log 2>&1
for f in llama_auto llama_inductor vit_auto vit_inductor; do
  echo "== $f"; grep -E "^step|going back|runs again|Error|error" $OUT/$f.log | cut -c1-200
done
