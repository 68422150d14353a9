#!/usr/bin/env bash
# Session 35 (issue 18), command 5: HF Llama's step peak near the planner's floor: full_ac
# and the backend at a fixed activation budget of 0.125 (about 1.17 GiB, where session
# 34's memory-limit search found its least predicted step peak, 2.89 GiB), dumped so
# that measured.json names the allocations live at the measured peak.
#   OUT=dir bash benchmarks/results/2026-11-27_s35_cmd5.sh
set -u
source benchmarks/results/zoo_rows.sh
zoo_rows llama llama full_ac,offload:0.125 200 200 --dump
python - <<'PY' > "$OUT/llama_peaks.txt" 2>&1
import glob, json, os
for f in sorted(glob.glob(os.environ["OUT"] + "/zoo_llama/llama/dump/*/graph_*/measured*.json")):
    d = json.load(open(f))
    print(f.split("/dump/")[1], {k: d[k] for k in d if "peak" in k or k in ("call", "held_before_bytes")})
    for h in d.get("holders", [])[:25]:
        print("   ", h)
PY
zoo_summary
cat "$OUT/llama_peaks.txt" | cut -c1-400 | head -80
