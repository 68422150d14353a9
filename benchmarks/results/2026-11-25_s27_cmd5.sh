#!/usr/bin/env bash
# Session 27 (issue 18), command 5: the measured step peak in the allocator's blocks
# (offload_compiler/runtime/blocks.py): its GPU tests, then ViT-B/16's memory-limit row
# (offload-limit:MID, exceeded by 8.5 and 11 MiB in session 17) with the rows it derives
# from.   OUT=dir bash benchmarks/results/2026-11-25_s27_cmd5.sh
set -u
export PYTHONPATH=$PWD
python -m pytest -q -m gpu -rfEx -s -p no:cacheprovider tests/test_gpu.py \
  -k "measured_step_peak or measurement_matches or memory_limit or timed_call_runs_without" \
  > $OUT/tests.log 2>&1
grep -E "^step [0-9]|passed|failed|FAILED|Error|did not fit" $OUT/tests.log | tail -12
timeout 420 python benchmarks/zoo.py --models vit --strategies inductor,full_ac,offload-limit:MID \
  --steps 3 --warmup 1 --timeout 170 --budget-seconds 380 --caches warm --out $OUT/zoo \
  > $OUT/zoo.log 2>&1
grep -rh "did not fit\|MemoryLimitError" $OUT/zoo | head -5
tar czf $OUT/zoo.tgz -C $OUT zoo && rm -rf $OUT/zoo
tail -25 $OUT/zoo.log
