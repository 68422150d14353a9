#!/usr/bin/env bash
# Session 43 (issue 18), command 2: ResNet-50 under command 1's midpoint limit (4080 MiB), alone,
# with a row limit that leaves room for the re-plans (command 1's row ran past 120 s), then
# ViT-B/16 (Inductor, "auto") interleaved, looking for the recomputation fit's log lines.
#   OUT=dir bash benchmarks/results/2026-11-28_s43_cmd2.sh
set -u
source benchmarks/results/zoo_rows.sh
zoo_rows resnet50 resnet50 offload-limit:4080MiB 270 10
cp "$OUT"/zoo_resnet50/*/offload-limit_4080MiB.log "$OUT/limit_row.log" 2>/dev/null
grep -h -E 'held back|room|first steps|memory_limit|measured graph|planning|peak' "$OUT/limit_row.log" | cut -c1-400 | head -n 30
timeout 265 python benchmarks/interleaved.py --model benchmarks/zoo_models.py:vit --dtype float32 \
  --strategies inductor,offload:auto --rounds 6 --steps 8 --json "$OUT/vit.json" > "$OUT/vit.log" 2>&1
echo "vit rc $?" >> "$OUT/gpu.txt"
grep -h -E 'measured|planning again|planning once|going back|keeping|runs again|judged|priced' "$OUT/vit.log" \
  | cut -c1-400
tail -n 5 "$OUT/vit.log"
zoo_summary
