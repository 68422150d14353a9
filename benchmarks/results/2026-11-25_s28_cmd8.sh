#!/usr/bin/env bash
# Session 28 (issue 18), command 8: the GPU suite on the final code (realized-on-reuse liveness).
#   OUT=dir bash benchmarks/results/2026-11-25_s28_cmd5.sh
set -u
export PYTHONPATH=$PWD
python -m pytest -q -m gpu -n 6 --dist load -rfEx -p no:cacheprovider tests > $OUT/suite.log 2>&1
tail -8 $OUT/suite.log
