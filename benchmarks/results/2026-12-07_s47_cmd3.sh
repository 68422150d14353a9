#!/usr/bin/env bash
# Session 47 (issue 18), command 3: the host-copy hazard test with host blocks filled with
# NaN as they are taken (command 2: the planted run still got the gradients right), the
# package installed so the tests that name the backend "offload" find it, and the
# awkward-input tests on torch 2.11 (CPU).
#   OUT=dir bash benchmarks/results/2026-12-07_s47_cmd3.sh
set -u
source benchmarks/results/zoo_rows.sh
python -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1
echo "install rc $?" >> "$OUT/gpu.txt"
timeout 100 python -m pytest -q -s -p no:cacheprovider -rfEx tests/test_gpu.py \
  -k "host_copy_before_its_copy_ends" > "$OUT/gpu_one.log" 2>&1
echo "gpu host-copy test rc $?" >> "$OUT/gpu.txt"
grep -E "^E  |FAILED|passed|failed|buf[0-9]+" "$OUT/gpu_one.log" | grep -v "^offload" | head -n 12 | cut -c1-300
CUDA_VISIBLE_DEVICES= timeout 60 python -m pytest -q -n 4 -p no:cacheprovider -rfEx \
  tests/test_awkward_inputs.py > "$OUT/cpu_tests.log" 2>&1
echo "cpu tests (torch 2.11) rc $?" >> "$OUT/gpu.txt"
grep -E "^E  |FAILED|passed|failed" "$OUT/cpu_tests.log" | head -n 8
cat "$OUT/gpu.txt"
