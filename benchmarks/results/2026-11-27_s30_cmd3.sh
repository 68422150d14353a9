#!/usr/bin/env bash
# Session 30 (issue 18), command 3: the GPU suite on the two-timed-call measurement, then
# profiles of settled steps of HF Llama at "auto" and under Inductor
# (2026-11-27_s30_profile_probe.py), traces gzipped under $OUT.
#   OUT=dir bash benchmarks/results/2026-11-27_s30_cmd3.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/gpu.txt
timeout 320 python -m pytest -q -m gpu -n 6 --dist load -rfEx -p no:cacheprovider tests > $OUT/suite.log 2>&1
P=benchmarks/results/2026-11-27_s30_profile_probe.py
timeout 150 python $P llama '{"memory_budget": "auto"}' 14 $OUT/llama_auto.json > $OUT/llama_auto.log 2>&1
timeout 75 python $P llama inductor 3 $OUT/llama_inductor.json > $OUT/llama_inductor.log 2>&1
gzip -f $OUT/*.json
tail -6 $OUT/suite.log | cut -c1-300
for f in llama_auto llama_inductor; do
  echo "== $f"; grep -E "walls|Error" $OUT/$f.log | cut -c1-200
done
cat $OUT/gpu.txt
