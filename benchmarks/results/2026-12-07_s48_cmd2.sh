#!/usr/bin/env bash
# Session 48 (issue 18), command 2: command 1's forward pool again with its estimate sizing the
# buffers (with the peak-memory reordering off, Inductor sizes none: command 1's graph 1 made 614
# allocations a forward), the pool's tests on torch 2.11 (CPU), the two host-copy GPU tests by name
# (command 1's suite finished its tests but not its run), then ResNet-50's "auto" interleaved with
# Inductor and ViT-B/16's with Inductor and SAC.
#   OUT=dir bash benchmarks/results/2026-12-07_s48_cmd2.sh
set -u
python -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1
source benchmarks/results/zoo_rows.sh
CUDA_VISIBLE_DEVICES= timeout 90 python -m pytest -q -n 4 -p no:cacheprovider -rfEx tests/test_graph.py \
  -k "allocates_no_more or buffer_pool or host_copies_out or reuse_estimate" > "$OUT/cpu_tests.log" 2>&1
echo "cpu tests (torch 2.11) rc $?" >> "$OUT/gpu.txt"
tail -n 2 "$OUT/cpu_tests.log"
timeout 80 python -m pytest -q -p no:cacheprovider -rA tests/test_gpu.py -k "host_copy" > "$OUT/gpu_host_copy.log" 2>&1
echo "gpu host-copy tests rc $?" >> "$OUT/gpu.txt"
grep -E "^(PASSED|FAILED|SKIPPED|ERROR)|passed|failed" "$OUT/gpu_host_copy.log" | head -n 8
interleaved_rows resnet50 resnet50 float32 inductor,offload:auto 190 --rounds 4 --steps 6
interleaved_rows vit vit float32 inductor,offload:auto,sac 200 --blocks model.blocks --rounds 3 --steps 6
cat "$OUT/gpu.txt"
