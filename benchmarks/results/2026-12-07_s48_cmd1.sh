#!/usr/bin/env bash
# Session 48 (issue 18), command 1: the GPU suite (session 47's host-copy tests, NaN-filled host
# blocks, never run on a GPU), the buffer-pool tests on torch 2.11 (CPU), then ResNet-50's "auto"
# interleaved with Inductor with a forward that offloads keeping Inductor's buffer pool (its
# allocations and host time against session 47's 616 and 10.96 ms).
#   OUT=dir bash benchmarks/results/2026-12-07_s48_cmd1.sh
set -u
python -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1
source benchmarks/results/zoo_rows.sh
gpu_suite 200
CUDA_VISIBLE_DEVICES= timeout 100 python -m pytest -q -n 4 -p no:cacheprovider -rfEx tests/test_simulator_solver.py \
  tests/test_graph.py -k "buffer_pool or reuse_estimate or host_copies_out or pool or held" > "$OUT/cpu_tests.log" 2>&1
echo "cpu tests (torch 2.11) rc $?" >> "$OUT/gpu.txt"
tail -n 2 "$OUT/cpu_tests.log"
interleaved_rows resnet50 resnet50 float32 inductor,offload:auto 200 --rounds 4 --steps 6
grep -h "round" "$OUT/resnet50.log" | cut -c1-300
cat "$OUT/gpu.txt"
