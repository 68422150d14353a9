#!/usr/bin/env bash
# Session 44 (issue 18), command 2: where ViT-B/16's recomputations cost their time, kernel by
# kernel: benchmarks/profile_step.py (now any model factory) on Inductor, SAC and two
# recompute-only plans (copies priced out of reach, re-planning off), then HF Llama's "auto"
# interleaved with Inductor with recomputations priced through casts (e0271f9).
#   OUT=dir bash benchmarks/results/2026-11-28_s44_cmd2.sh
set -u
source benchmarks/results/zoo_rows.sh
RO='{"replan": false, "hardware": {"d2h_gbps": 0.01, "h2d_gbps": 0.01, "duplex_gbps": 0.02}}'
TORCHINDUCTOR_FORCE_DISABLE_CACHES=1 timeout 300 python benchmarks/profile_step.py \
  --model benchmarks/zoo_models.py:vit --dtype float32 --blocks model.blocks --configs inductor,sac,0.7,0.55 \
  --options "$RO" --out "$OUT/profile" > "$OUT/profile.log" 2>&1
echo "profile rc $?" >> "$OUT/gpu.txt"
rm -f "$OUT"/profile/trace_*.json; tar czf "$OUT/profile_dumps.tgz" -C "$OUT/profile" 0.7 0.55 && rm -rf "$OUT/profile/0.7" "$OUT/profile/0.55"
grep -v "^offload: \|^ *$" "$OUT/profile.log" | tail -n 12 | cut -c1-400
interleaved_rows llama llama bfloat16 inductor,offload:auto 260 --rounds 3 --steps 6
cat "$OUT/gpu.txt"
