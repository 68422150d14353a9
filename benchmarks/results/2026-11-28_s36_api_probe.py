"""Session 36 (issue 18): where does the host of a plan with transfer ops wait? ResNet-50's
first "auto" plan (22 offloaded, re-planning off) ran 1.54x Inductor's step in one
process, its host taking 48.4 ms to issue a synchronised step against 32.9 (command 4),
but under cProfile its host did only about 11 ms more per step than Inductor's, most of
it in the transfer ops: the rest looks like the host waiting for the GPU somewhere a
profile of Python cannot see. Here ``torch.profiler`` records the CUDA runtime calls of
two steps of each (after warm-up): per API call, its count, total and longest time.
A call that blocks the host on the GPU (a synchronous copy, an allocation, an event or
stream synchronize) shows as a long maximum.

    PYTHONPATH=$PWD python benchmarks/results/2026-11-28_s36_api_probe.py [--trace DIR]

``--trace DIR`` (command 6): only the offload plan, and one profiled step exported as a
Chrome trace (``DIR/offload_step.json``) to read where the compute stream idles and what
the host was doing then.
"""
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import offload_compiler  # noqa: E402
from benchmarks.zoo_models import resnet50  # noqa: E402

model, (x, y) = resnet50()
model = model.cuda()
x, y = x.cuda().contiguous(memory_format=torch.channels_last), y.cuda()
trace_dir = sys.argv[sys.argv.index("--trace") + 1] if "--trace" in sys.argv else None
fns = {"inductor": torch.compile(model),
       "offload first plan": torch.compile(model, backend=offload_compiler.make_backend(replan=False))}
if trace_dir:
    del fns["inductor"]


def step(fn):
    fn(x, y).backward()
    model.zero_grad(set_to_none=True)


for name, fn in fns.items():
    for _ in range(6):
        step(fn)
    torch.cuda.synchronize()
    host = []
    for _ in range(5):
        t0 = time.perf_counter()
        step(fn)
        host.append((time.perf_counter() - t0) * 1e3)
        torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(1 if trace_dir else 2):
            step(fn)
        torch.cuda.synchronize()
    if trace_dir:
        prof.export_chrome_trace(f"{trace_dir}/offload_step.json")
    rows = []
    for e in prof.key_averages():
        if e.key.startswith("cuda") or e.key.startswith("cu"):
            rows.append((e.cpu_time_total, e.key, e.count, e.cpu_time_total / max(e.count, 1)))
    # the longest single runtime call of each name
    longest = {}
    for e in prof.events():
        if e.name.startswith("cu"):
            d = e.cpu_time_range.elapsed_us() if hasattr(e, "cpu_time_range") else e.cpu_time
            longest[e.name] = max(longest.get(e.name, 0), d)
    print(f"== {name}: host to issue a synced step (ms): {sorted(round(h, 1) for h in host)}")
    print(f"   {'CUDA runtime call':34} {'count/2 steps':>13} {'total ms':>9} {'avg us':>8} {'max us':>8}")
    for total, key, count, avg in sorted(rows, reverse=True)[:14]:
        print(f"   {key[:34]:34} {count:13d} {total / 1e3:9.2f} {avg:8.1f} {longest.get(key, 0):8.0f}")
    gpu = [e for e in prof.key_averages() if e.device_time_total > 0]
    print(f"   GPU busy (sum of kernel and copy time, 2 steps): {sum(e.device_time_total for e in gpu) / 1e3:.1f} ms")
