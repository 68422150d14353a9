"""Session 38 (issue 18): what makes an offload plan's forward slower to issue? Command 2
measured ResNet-50's forward issued in 15.7 ms at ``memory_budget=0.75`` (about 20
values offloaded) against 10.1 ms with nothing moved, rounds interleaved; its transfer
ops' bodies account for about 3 ms of the difference. Per phase of one synchronised
step of each variant: kernel launches (``cudaLaunchKernel``/``cuLaunchKernel`` calls in
a profile), the allocator's allocations (``memory_stats``), and the host's time
(median of 20 steps, synchronised before each).

    PYTHONPATH=$PWD python benchmarks/results/2026-11-28_s38_launch_probe.py
"""
import logging
import statistics
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, "benchmarks")
import offload_compiler  # noqa: E402
from zoo_models import resnet50  # noqa: E402

logging.basicConfig(level=logging.WARNING, format="%(message)s")
model, (x, y) = resnet50()
model, x, y = model.cuda(), x.cuda(), y.cuda()
variants = {"none": {"policy": "none"}, "offload0.75": {"memory_budget": 0.75, "replan": False},
            "auto": {"memory_budget": "auto", "replan": False}}


def allocs():
    s = torch.cuda.memory_stats()
    return s.get("allocation.all.allocated", 0)


rows = []
for name, options in variants.items():
    try:
        backend = offload_compiler.make_backend(**options)
    except Exception as err:  # an option this version does not take
        print(f"{name}: {err}")
        continue
    fn = torch.compile(model, backend=backend)
    for _ in range(3):
        fn(x, y).backward()
        model.zero_grad(set_to_none=True)
    fw, bw, fa, ba = [], [], 0, 0
    for _ in range(20):
        torch.cuda.synchronize()
        a0 = allocs()
        t0 = time.perf_counter()
        loss = fn(x, y)
        t1 = time.perf_counter()
        a1 = allocs()
        loss.backward()
        t2 = time.perf_counter()
        a2 = allocs()
        torch.cuda.synchronize()
        model.zero_grad(set_to_none=True)
        fw.append((t1 - t0) * 1e3)
        bw.append((t2 - t1) * 1e3)
        fa, ba = a1 - a0, a2 - a1
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with torch.profiler.record_function("FW"):
            loss = fn(x, y)
        with torch.profiler.record_function("BW"):
            loss.backward()
        torch.cuda.synchronize()
    model.zero_grad(set_to_none=True)
    launches = {"FW": 0, "BW": 0}
    events = prof.events()
    spans = {e.name: (e.time_range.start, e.time_range.end) for e in events if e.name in launches}
    for e in events:
        if e.name in ("cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx", "cudaLaunchKernelExC"):
            for phase, (s, t) in spans.items():
                if s <= e.time_range.start <= t:
                    launches[phase] += 1
    plans = getattr(backend, "plans", [])
    moved = [(len(p.offloaded), len(p.recomputed)) for p in plans] if plans else []
    rows.append((name, statistics.median(fw), statistics.median(bw), launches["FW"], launches["BW"], fa, ba, moved))
    print(f"{name}: done", flush=True)

print("\nvariant        host fw ms  host bw ms  launches fw  launches bw  allocs fw  allocs bw  (offloaded, recomputed)")
for r in rows:
    print(f"{r[0]:14s} {r[1]:10.2f}  {r[2]:10.2f}  {r[3]:11d}  {r[4]:11d}  {r[5]:9d}  {r[6]:9d}  {r[7]}")
