"""Throwaway of session 15: how far ahead of the GPU is the host, per phase, unprofiled.

    python hostprobe.py MODEL STRATEGY   # MODEL of benchmarks/zoo_models.py; inductor|auto|FRACTION

Per step: host time of the forward call and of backward() (perf_counter, no sync), GPU
time of each (events); then the same with the GPU held back by a 150 ms sleep kernel
first, so the host never waits for it: the host's pure issue time; then one profiled
step that counts kernel launches per phase (the profiler's own host times not used).
"""
import sys, time, statistics, json, os
import torch
sys.path.insert(0, "benchmarks")
import zoo_models
from offload_compiler import OffloadBackend  # noqa

name, strategy = sys.argv[1], sys.argv[2]
model, inputs = getattr(zoo_models, name)()
dtype = torch.bfloat16 if name in ("llama", "gpt") else None
model = model.cuda()
if dtype: model = model.to(dtype)
inputs = tuple(x.cuda() for x in inputs)
if name == "resnet50":
    model = model.to(memory_format=torch.channels_last)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
if strategy == "inductor":
    compiled, b = torch.compile(model), None
else:
    from offload_compiler.config import OffloadConfig
    extra = json.loads(os.environ.get("GPROF_OPTS", "{}"))
    b = OffloadBackend(OffloadConfig(memory_budget=float(strategy), **extra) if strategy != "auto" else OffloadConfig(**extra))
    compiled = torch.compile(model, backend=b)
E = lambda: torch.cuda.Event(enable_timing=True)
import gc, threading
GC = {"n": 0, "s": 0.0, "gen2": 0}
_t = [0.0]
def _cb(phase, info):
    if phase == "start":
        _t[0] = time.perf_counter()
    else:
        GC["n"] += 1; GC["s"] += time.perf_counter() - _t[0]; GC["gen2"] += info["generation"] == 2
gc.callbacks.append(_cb)

def step(hold=False):
    ev = [E() for _ in range(3)]
    if hold:
        torch.cuda._sleep(int(1.5e8))
    ev[0].record()
    h0 = time.perf_counter()
    loss = compiled(*inputs)
    h1 = time.perf_counter()
    ev[1].record()
    loss.backward()
    h2 = time.perf_counter()
    ev[2].record()
    opt.step(); opt.zero_grad(set_to_none=True)
    return ev, (h1 - h0) * 1e3, (h2 - h1) * 1e3

t0 = time.time()
for i in range(30):
    step()
    if b is not None and b.settled and i >= 3: break
torch.cuda.synchronize()
print(f"{name} {strategy}: warm/settle {time.time()-t0:.1f} s, {i+1} steps", flush=True)
for _ in range(3): step()
rows = {"free": [], "held": []}
per = []
for hold in (False,) * 8 + (True,) * 3:
    g0 = dict(GC)
    s0, s1 = E(), E(); s0.record()
    ev, hf, hb = step(hold)
    s1.record()
    torch.cuda.synchronize()
    r = (ev[0].elapsed_time(ev[1]), ev[1].elapsed_time(ev[2]), hf, hb)
    rows["held" if hold else "free"].append(r)
    if not hold:
        per.append([round(x, 2) for x in r] + [round(ev[0].elapsed_time(s1), 2), GC["n"] - g0["n"], round((GC["s"] - g0["s"]) * 1e3, 2), GC["gen2"] - g0["gen2"]])
print("per step free [gpu_fw, gpu_bw, host_fw, host_bw, step_incl_opt, gc_n, gc_ms, gc2]:")
for p_ in per: print("  ", p_)
print("threads:", [t.name for t in threading.enumerate()])
from torch.profiler import profile, ProfilerActivity, record_function
with profile(activities=[ProfilerActivity.CPU]) as prof:
    with record_function("PHASE_FW"):
        loss = compiled(*inputs)
    with record_function("PHASE_BW"):
        loss.backward()
    opt.step(); opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
evs = prof.events()
rng = {e.name: (e.time_range.start, e.time_range.end) for e in evs if e.name.startswith("PHASE_")}
launch = {"PHASE_FW": 0, "PHASE_BW": 0}
for e in evs:
    if "aunch" in e.name and ("cuda" in e.name or "cu" == e.name[:2]):
        for ph, (s, t) in rng.items():
            if s <= e.time_range.start <= t:
                launch[ph] += 1
ops = {"PHASE_FW": 0, "PHASE_BW": 0}
for e in evs:
    if e.name.startswith("offload::"):
        for ph, (s, t) in rng.items():
            if s <= e.time_range.start <= t:
                ops[ph] += 1
med = lambda xs: statistics.median(xs)
res = {"model": name, "strategy": strategy}
for k, rs in rows.items():
    res[k] = {"gpu_fw_ms": med([r[0] for r in rs]), "gpu_bw_ms": med([r[1] for r in rs]),
              "host_fw_ms": med([r[2] for r in rs]), "host_bw_ms": med([r[3] for r in rs])}
res["launches"] = launch; res["transfer_ops"] = ops
if b is not None:
    res["plans"] = [p.summary() for p in b.current_plans]
    for p in b.plans:
        print("MEASURED", p.measured_text(), "| corrections", p.corrections)
print("RESULT " + json.dumps(res), flush=True)
