"""Throwaway of session 14 (kept as the record of its figures, not a maintained benchmark): where a
strategy's steady step goes on the GPU: kernel time by kind, step times, a Chrome trace.

    python benchmarks/results/2026-11-23_s14_gprof.py vit auto   # MODEL of benchmarks/zoo_models.py, inductor|auto|FRACTION
    GPROF_OPTS='{"min_offload_bytes": 16777216}' python benchmarks/results/2026-11-23_s14_gprof.py vit auto
"""
import sys, time, statistics, collections, json, os
import torch
sys.path.insert(0, "benchmarks")
import zoo_models
from offload_compiler import OffloadBackend  # noqa

name, strategy = sys.argv[1], sys.argv[2]
out = os.environ.get("OUT", ".")
model, inputs = getattr(zoo_models, name)()
dtype = torch.bfloat16 if name.startswith("llama") else None
model = model.cuda()
if dtype: model = model.to(dtype)
inputs = tuple(x.cuda() for x in inputs)
if name == "resnet50":
    model = model.to(memory_format=torch.channels_last)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
if strategy == "inductor":
    compiled = torch.compile(model)
    b = None
else:
    from offload_compiler.config import OffloadConfig
    extra = json.loads(os.environ.get("GPROF_OPTS", "{}"))
    b = OffloadBackend(OffloadConfig(memory_budget=float(strategy), **extra) if strategy != "auto" else OffloadConfig(**extra))
    compiled = torch.compile(model, backend=b)
def step():
    loss = compiled(*inputs)
    loss.backward()
    opt.step(); opt.zero_grad(set_to_none=True)
t0 = time.time()
for i in range(30):
    step()
    if b is not None and b.settled and i >= 3: break
torch.cuda.synchronize()
print(f"{name} {strategy}: warm/settle {time.time()-t0:.1f} s, {i+1} steps", flush=True)
for _ in range(3): step()
ts = []
for _ in range(8):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record(); step(); e.record(); torch.cuda.synchronize(); ts.append(s.elapsed_time(e))
from torch.profiler import profile, ProfilerActivity
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    for _ in range(3): step()
    torch.cuda.synchronize()
kinds = collections.Counter(); counts = collections.Counter(); streams = collections.Counter()
names = collections.Counter()
spans = []
for ev in prof.events():
    if ev.device_type != torch.autograd.DeviceType.CUDA: continue
    n = ev.name; d = ev.device_time if hasattr(ev, "device_time") else ev.cuda_time
    low = n.lower()
    if "memcpy" in low and ("dtoh" in low or "device -> pinned" in low or "dtoh" in low): k = "memcpy DtoH"
    elif "memcpy" in low and ("htod" in low): k = "memcpy HtoD"
    elif "memcpy" in low or "memset" in low: k = "memcpy/set other"
    elif "flash" in low or "fmha" in low or "attention" in low: k = "attention"
    elif "gemm" in low or "nvjet" in low or "cutlass" in low or "sm90" in low or "cublas" in low: k = "gemm"
    elif "conv" in low or "cudnn" in low or "implicit" in low: k = "conv"
    elif low.startswith("triton_poi"): k = "triton pointwise"
    elif low.startswith("triton_red") or low.startswith("triton_per"): k = "triton reduction"
    elif low.startswith("triton"): k = "triton other"
    elif "multi_tensor" in low or "foreach" in low: k = "optimizer"
    else: k = "other"
    kinds[k] += d; counts[k] += 1; names[n[:70]] += d
if b is not None:
    for p in b.current_plans: print(p.summary())
print(f"{name} {strategy}: step median {statistics.median(ts):.2f} ms (min {min(ts):.2f}, max {max(ts):.2f})")
tot = sum(v for k, v in kinds.items() if not k.startswith("memcpy D") and not k.startswith("memcpy H"))
print(f"  compute kernels per step {tot/3/1000:.2f} ms; by kind (ms/step, count/step):")
for k, v in kinds.most_common():
    print(f"    {k:20s} {v/3/1000:8.2f} {counts[k]//3:6d}")
print("  top kernels (ms/step):")
for n, v in names.most_common(12):
    print(f"    {v/3/1000:7.3f}  {n}")
prof.export_chrome_trace(f"{out}/{name}_{strategy}.json")
