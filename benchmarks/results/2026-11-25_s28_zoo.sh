#!/usr/bin/env bash
# Session 28 (issue 18), commands 9 and 10: the zoo with every strategy of one model, on
# the final code (S: strategies, default all).
#   OUT=dir M=vit|llama T=row-timeout B=budget-seconds [S=...] bash benchmarks/results/2026-11-25_s28_zoo.sh
set -u
export PYTHONPATH=$PWD
timeout 590 python benchmarks/zoo.py --models $M ${S:+--strategies $S} --steps 3 --warmup 1 --timeout $T --budget-seconds $B \
  --caches warm --out $OUT/zoo > $OUT/zoo.log 2>&1
grep -rh "MemoryLimitError\|re-plan\|measured" $OUT/zoo/*/*.log 2>/dev/null | grep -E "step peak .* measured vs" | cut -c1-300 | head -12 > $OUT/replans.txt
tar czf $OUT/zoo.tgz -C $OUT zoo && rm -rf $OUT/zoo
tail -30 $OUT/zoo.log
