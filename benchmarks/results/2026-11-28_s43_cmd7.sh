#!/usr/bin/env bash
# Session 43 (issue 18), command 7: ResNet-50 under command 2's limit (4080 MiB) again, with a
# new plan predicted no faster than the plan in force not run (planning.judging.no_faster).
#   OUT=dir bash benchmarks/results/2026-11-28_s43_cmd7.sh
set -u
source benchmarks/results/zoo_rows.sh
zoo_rows resnet50 resnet50 offload-limit:4080MiB 165 5
cp "$OUT"/zoo_resnet50/*/offload-limit_4080MiB.log "$OUT/limit_row.log" 2>/dev/null
grep -h -E 'not run|measured graph|planning again|going back' "$OUT/limit_row.log" | cut -c1-330
tail -n 12 "$OUT/zoo_resnet50.log" | head -n 5
