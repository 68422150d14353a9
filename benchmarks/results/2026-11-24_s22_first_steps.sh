#!/usr/bin/env bash
# Session 22 (issue 19): the first steps of zoo models on the final code, each model's
# rows in both orders (2026-11-24_s21_first_steps.sh); GPU=1 runs the GPU suite first.
#   OUT=dir [GPU=1] bash benchmarks/results/2026-11-24_s22_first_steps.sh MODEL...
# STRATEGIES="a b c" REVERSE=0: those rows in that order only (ResNet-50's six rows do
# not fit one 10-minute command: two commands, one order each).
# Logs in $OUT/logs.tgz; each model's first-step lines last.
set -u
if [ "${GPU:-0}" = 1 ]; then
  mkdir -p $OUT/suite
  PYTHONPATH=$PWD python -m pytest -q -m gpu -n 6 --dist load -rfEx -p no:cacheprovider tests \
    > $OUT/suite/pytest.log 2>&1
  tail -3 $OUT/suite/pytest.log
fi
for m in "$@"; do
  mkdir -p $OUT/$m
  OUT=$OUT/$m bash benchmarks/results/2026-11-24_s21_first_steps.sh $m ${STRATEGIES:-} \
    > $OUT/$m/summary.txt 2>&1
done
tar czf $OUT/logs.tgz -C $OUT "$@" $( [ "${GPU:-0}" = 1 ] && echo suite )
for m in "$@"; do echo "== $m"; cat $OUT/$m/summary.txt; rm -rf $OUT/$m; done
rm -rf $OUT/suite
