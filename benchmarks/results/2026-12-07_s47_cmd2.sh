#!/usr/bin/env bash
# Session 47 (issue 18), command 2: command 1's two GPU failures again, one process (the
# planted host-copy hazard now drawn on an input no run before drew), the awkward-input and
# recompute tests on torch 2.11 (CPU: saved values named as backward's placeholders), then
# ViT-B/16's "auto" interleaved with Inductor.
#   OUT=dir bash benchmarks/results/2026-12-07_s47_cmd2.sh
set -u
source benchmarks/results/zoo_rows.sh
timeout 120 python -m pytest -q -p no:cacheprovider -rfEx tests/test_gpu.py \
  -k "host_copy_before_its_copy_ends or not_the_hosts_pace" > "$OUT/gpu_two.log" 2>&1
echo "gpu two tests rc $?" >> "$OUT/gpu.txt"
grep -E "^E  |FAILED|passed|failed" "$OUT/gpu_two.log" | head -n 8
CUDA_VISIBLE_DEVICES= timeout 90 python -m pytest -q -n 4 -p no:cacheprovider -rfEx \
  tests/test_awkward_inputs.py tests/test_recompute_saved.py > "$OUT/cpu_tests.log" 2>&1
echo "cpu tests (torch 2.11) rc $?" >> "$OUT/gpu.txt"
tail -n 2 "$OUT/cpu_tests.log"
interleaved_rows vit vit float32 inductor,offload:auto 230 --rounds 3 --steps 6
grep -h "round" "$OUT/vit.log" | cut -c1-300
cat "$OUT/gpu.txt"
