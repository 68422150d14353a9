#!/usr/bin/env bash
# Session 47 (issue 18), command 1: the GPU suite at this head (session 46's host-copy layout
# and its GPU test never ran on a GPU), the host-copy layout tests and the Hugging Face parity
# tests on torch 2.11 (CPU), then ResNet-50's "auto" interleaved with Inductor, each round's
# garbage collections recorded (where its slow first round goes).
#   OUT=dir bash benchmarks/results/2026-12-07_s47_cmd1.sh
set -u
source benchmarks/results/zoo_rows.sh
gpu_suite 230
CUDA_VISIBLE_DEVICES= timeout 150 python -m pytest -q -n 8 -p no:cacheprovider -rfEx \
  tests/test_hf_models.py "tests/test_graph.py::test_a_host_copy_is_made_in_the_layout_inductor_requires_of_the_saved_value" \
  tests/test_graph.py::test_the_compile_stops_where_a_kernel_would_read_a_host_copy > "$OUT/cpu_tests.log" 2>&1
echo "cpu tests (torch 2.11) rc $?" >> "$OUT/gpu.txt"
tail -n 4 "$OUT/cpu_tests.log"
interleaved_rows resnet50 resnet50 float32 inductor,offload:auto 190 --rounds 4 --steps 6
grep "round" "$OUT/resnet50.log" | cut -c1-300
cat "$OUT/gpu.txt"
