#!/usr/bin/env bash
# Session 28 (issue 18), command 3: Inductor's generated backward for HF Llama at budget
# 0.12 (its kernels' order and buffer reuse, against the order the planner's liveness reads).
#   OUT=dir bash benchmarks/results/2026-11-25_s28_cmd3.sh
set -u
export PYTHONPATH=$PWD OFFLOAD_COMPILER_PLAN_CACHE=0 TORCHINDUCTOR_CACHE_DIR=/tmp/s28_inductor
rm -rf /tmp/s28_inductor
P=benchmarks/results/2026-11-25_s28_peak_probe.py
timeout 200 python $P llama '{"memory_budget": 0.12, "replan": false}' 2 > $OUT/b012.log 2>&1
mkdir -p $OUT/code
for f in $(grep -rl "_scaled_dot_product_cudnn_attention_backward" /tmp/s28_inductor --include=*.py); do cp $f $OUT/code/; done
ls -la $OUT/code; tar czf $OUT/code.tgz -C $OUT code && rm -rf $OUT/code
grep -E "^step|^predicted" $OUT/b012.log
