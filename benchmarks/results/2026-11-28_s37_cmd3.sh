#!/usr/bin/env bash
# Session 37 (issue 18), command 3: the GPU test command 2 failed (it read the measurement
# at READ_AT, before the kernels' call a host-paced timing adds), as mended; then the zoo's
# HF Llama rows at full checkpointing's memory: Inductor (the limit is computed from it), full checkpointing, the backend under
# full checkpointing's measured peak as its memory limit, and budget 0.2 (planned at 2.41
# GiB and 142.5 ms since f19112f; command 1 measured its peak at 2.26 GiB against full
# checkpointing's 2.66).
#   OUT=dir bash benchmarks/results/2026-11-28_s37_cmd3.sh
set -u
source benchmarks/results/zoo_rows.sh
: timeout 60 python -m pytest -q -m gpu -rfEx -p no:cacheprovider \
  tests/test_gpu.py::test_the_timed_call_runs_without_the_allocators_history > "$OUT/test.log" 2>&1
echo "test rc $?" >> "$OUT/gpu.txt"
zoo_rows llama llama inductor,full_ac,offload-limit:FULL,offload:0.2 150 400
zoo_summary
tail -n 2 "$OUT/test.log"
