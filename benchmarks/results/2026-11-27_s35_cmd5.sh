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
for f in sorted(glob.glob(os.environ["OUT"] + "/zoo_llama/llama/dump/**/measured.json", recursive=True)):
    d = json.load(open(f))
    m, p = d["measured"], d["predicted"] or {}
    print(f.split("/dump/")[1], "measured:", {k: m.get(k) for k in ("call", "held_before_bytes", "step_peak_bytes", "peak_phase")},
          "predicted:", {k: p.get(k) for k in ("step_peak_bytes", "activation_peak_bytes", "peak_time_ms")})
    print("  measured holders:")
    for h in m.get("holders", [])[:20]:
        print("   ", h)
    print("  predicted holders:")
    for h in (d.get("predicted_holders") or [])[:20]:
        print("   ", h)
PY
zoo_summary
cat "$OUT/llama_peaks.txt" | cut -c1-400 | head -80
