"""Session 30 (issue 18): where the compute stream idles in a profiled step, read from a
Chrome trace of ``2026-11-27_s30_profile_probe.py``. Throwaway analysis, kept with the
results it made.

    python benchmarks/results/2026-11-27_s30_trace_idle.py TRACE.json

Takes the stream with the most kernels as the compute stream and prints its span, the
kernels' busy time and the idle time, split into gaps before a kernel the host launched
after the gap began (the host was late) and gaps before a kernel launched earlier (it
waited on the device: an event wait on a copy, or another stream), each by the op that
launched the kernel or by the kernel waited on. Kernels more than 5 ms apart start a new
group (a step after a synchronisation).
"""
import json, sys
from collections import Counter
d = json.load(open(sys.argv[1]))
ev = d["traceEvents"]
kern = [e for e in ev if e.get("cat") == "kernel" and "dur" in e]
comp = Counter(e["args"].get("stream") for e in kern).most_common(1)[0][0]
runtime = {e["args"].get("correlation"): e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver") and "args" in e}
cpu_ops = sorted([e for e in ev if e.get("cat") == "cpu_op" and "dur" in e], key=lambda e: e["ts"])
ck = sorted([e for e in kern if e["args"].get("stream") == comp], key=lambda e: e["ts"])
copies = sorted([e for e in ev if e.get("cat") == "gpu_memcpy" and "dur" in e], key=lambda e: e["ts"])
steps, cur = [], [ck[0]]
for k in ck[1:]:
    if k["ts"] - (cur[-1]["ts"] + cur[-1]["dur"]) > 5000:
        steps.append(cur); cur = []
    cur.append(k)
steps.append(cur)
def outer(ts):
    names = [e["name"] for e in cpu_ops if e["ts"] <= ts <= e["ts"] + e["dur"]]
    return next((n for n in names if n.startswith("offload::")), names[-1] if names else "?")
for ks in steps:
    start, end = ks[0]["ts"], max(k["ts"] + k["dur"] for k in ks)
    busy = sum(k["dur"] for k in ks)
    late = early = 0.0; why = Counter()
    last = start
    for k in ks:
        if k["ts"] > last + 2:
            g = k["ts"] - last
            r = runtime.get(k["args"].get("correlation"))
            if r and r["ts"] > last:
                late += g; why[("late", outer(r["ts"])[:40])] += g
            else:
                early += g; why[("early", k["name"][:40])] += g
        last = max(last, k["ts"] + k["dur"])
    cp = [c for c in copies if start <= c["ts"] <= end]
    print(f"{len(ks)} kernels: span {(end-start)/1e3:.2f} ms busy {busy/1e3:.2f} idle {(end-start-busy)/1e3:.2f} "
          f"(host late {late/1e3:.2f}, waiting {early/1e3:.2f}); copies {len(cp)} {sum(c['dur'] for c in cp)/1e3:.1f} ms")
    for (kind, n), g in why.most_common(8):
        print(f"     {kind:5s} {g/1e3:6.2f} ms  {n}")
