#!/usr/bin/env bash
# Session 28 (issue 18), command 7: first plans' predicted step peak against the whole
# step's measured peak, no re-plan, with the liveness of values Inductor realizes on
# reuse (the residual stream's adds): ViT-B/16, ResNet-50, and HF Llama unchanged.
#   OUT=dir bash benchmarks/results/2026-11-25_s28_cmd7.sh
set -u
export PYTHONPATH=$PWD OFFLOAD_COMPILER_PLAN_CACHE=0
P=benchmarks/results/2026-11-25_s28_peak_probe.py
for spec in "vit 0.5" "vit auto" "vit 1.0" "resnet50 0.5" "llama 0.5"; do
  set -- $spec
  b=$2; [ "$b" = auto ] && b='"auto"'
  timeout 150 python $P $1 "{\"memory_budget\": $b, \"replan\": false}" 3 > $OUT/$1_$2.log 2>&1
  echo "### $1 $2"; grep -E "^step [12]|^predicted:|Error" $OUT/$1_$2.log | tail -4
done
