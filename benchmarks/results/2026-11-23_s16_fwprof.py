"""Throwaway (session 16): where the host's time goes in one compiled forward of ResNet-50,
Inductor against a plan with transfer ops (replan off), from the profiler's CPU events.

    python fwprof.py STRATEGY   # inductor | a memory budget fraction
"""
import collections, os, statistics, sys, time
import torch
sys.path.insert(0, "."); sys.path.insert(0, "benchmarks")  # run from the repository root
import zoo_models
from offload_compiler import OffloadBackend
from offload_compiler.config import OffloadConfig

strategy = sys.argv[1]
model, inputs = zoo_models.resnet50()
model = model.cuda().to(memory_format=torch.channels_last)
inputs = tuple(x.cuda() for x in inputs)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
b = None
if strategy == "inductor":
    compiled = torch.compile(model)
else:
    b = OffloadBackend(OffloadConfig(memory_budget=float(strategy), replan=False))
    compiled = torch.compile(model, backend=b)

def step():
    loss = compiled(*inputs); loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)

for _ in range(6):
    step()
torch.cuda.synchronize()
import gc, threading
if os.environ.get("GCOFF"):
    gc.collect(); gc.disable()
stats0 = [d["collections"] for d in gc.get_stats()]
hf = []
for _ in range(10):
    torch.cuda._sleep(int(2e8))  # hold the GPU: pure issue time
    t = time.perf_counter(); loss = compiled(*inputs); hf.append((time.perf_counter() - t) * 1e3)
    loss.backward(); opt.step(); opt.zero_grad(set_to_none=True); torch.cuda.synchronize()
stats1 = [d["collections"] for d in gc.get_stats()]
print(f"{strategy} gc={'off' if os.environ.get('GCOFF') else 'on'}: forward issued in {statistics.median(hf):.2f} ms "
      f"(median of 10, GPU held; min {min(hf):.2f}); collections by generation {[b - a for a, b in zip(stats0, stats1)]}; "
      f"threads {[t.name for t in threading.enumerate()]}; gc counts {gc.get_count()} thresholds {gc.get_threshold()}")
if b is not None:
    print(b.plans[-1].summary()[:300])
from torch.profiler import ProfilerActivity, profile, record_function
torch.cuda._sleep(int(2e8))
with profile(activities=[ProfilerActivity.CPU]) as prof:
    with record_function("PHASE_FW"):
        loss = compiled(*inputs)
loss.backward(); opt.step(); opt.zero_grad(set_to_none=True); torch.cuda.synchronize()
evs = [e for e in prof.events() if e.name != "PHASE_FW"]
fw = [e for e in prof.events() if e.name == "PHASE_FW"][0]
by = collections.defaultdict(lambda: [0, 0.0])
for e in evs:
    by[e.name][0] += 1
    by[e.name][1] += e.self_cpu_time_total
print(f"PHASE_FW total {fw.cpu_time_total / 1e3:.2f} ms (profiled); top by self CPU:")
for name, (n, us) in sorted(by.items(), key=lambda kv: -kv[1][1])[:18]:
    print(f"  {name[:60]:60s} {n:5d} calls {us / 1e3:8.2f} ms {us / max(n, 1):8.1f} us/call")
