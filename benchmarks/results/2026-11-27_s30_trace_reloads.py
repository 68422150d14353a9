"""Session 30 (issue 18): each H2D copy in a Chrome trace of
``2026-11-27_s30_profile_probe.py``, the compute-stream kernels that ran from its start
to the first kernel after it ended (the reload's consumer, where compute waited for it),
with their times. Throwaway analysis, kept with the results it made.

    python benchmarks/results/2026-11-27_s30_trace_reloads.py TRACE.json [COPIES]
"""
import json, sys
from collections import Counter
d = json.load(open(sys.argv[1]))
ev = d["traceEvents"]
kern = sorted([e for e in ev if e.get("cat") == "kernel" and "dur" in e], key=lambda e: e["ts"])
comp = Counter(e["args"].get("stream") for e in kern).most_common(1)[0][0]
ck = [k for k in kern if k["args"].get("stream") == comp]
cps = sorted([e for e in ev if e.get("cat") == "gpu_memcpy" and "dur" in e and "HtoD" in e["name"]], key=lambda e: e["ts"])
t0 = ck[0]["ts"]
for c in cps[:int(sys.argv[2]) if len(sys.argv) > 2 else 8]:
    s, e = c["ts"], c["ts"] + c["dur"]
    nxt = next(k for k in ck if k["ts"] >= e - 30)
    between = [k for k in ck if k["ts"] >= s - 200 and k["ts"] < nxt["ts"]]
    print(f"copy {(s-t0)/1e3:.2f}-{(e-t0)/1e3:.2f} ms ({c['args'].get('bytes',0)>>20} MiB); consumer-ish {nxt['name'][:40]} at {(nxt['ts']-t0)/1e3:.2f}")
    for k in between:
        print(f"     {(k['ts']-t0)/1e3:8.2f} {k['dur']/1e3:6.3f} {k['name'][:70]}")
