"""Session 40 probe (issue 18): what compiling a graph the way the backend compiles one
with transfer ops (``lowering.compile_inner``: Inductor's buffer pool and its peak-memory
reordering off) costs ResNet-50's host, with no transfer op in it.

ResNet-50's "auto" re-plan with 2 offloaded values (8 transfer ops, 0.79 ms in their
bodies) issued its forward in 16.28 ms with 616 allocations, and the plan after it, none
offloaded, in 7.53 ms with 322 (session 40, command 5). Here the backend with nothing
moved, compiled three ways in one process, rounds interleaved: as Inductor would; with
``allow_buffer_reuse`` off; with that and ``reorder_for_peak_memory`` off (what a graph
with transfer ops gets). Medians of 8 rounds of 5 synchronised steps.

    PYTHONPATH=$PWD python benchmarks/results/2026-11-28_s40_compile_probe.py
"""
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import offload_compiler  # noqa: E402
from benchmarks.zoo_models import resnet50  # noqa: E402
from offload_compiler import lowering  # noqa: E402

PATCH = [{}]


def compile_inner(gm, example_inputs, **kwargs):
    from torch._inductor import config
    from torch._inductor.compile_fx import compile_fx_inner
    with config.patch(PATCH[0]):
        return compile_fx_inner(gm, example_inputs, **kwargs)


lowering.compile_inner = compile_inner
torch._inductor.config.fx_graph_cache = False
torch._functorch.config.enable_autograd_cache = False
model, (x, y) = resnet50()
model = model.cuda()
x, y = x.cuda().contiguous(memory_format=torch.channels_last), y.cuda()
VARIANTS = {
    "as Inductor": ({}, torch.compile(model, backend=offload_compiler.make_backend(policy="none"))),
    "no pool": ({"allow_buffer_reuse": False},
                torch.compile(model, backend=offload_compiler.make_backend(policy="none"))),
    "no pool, no reorder": ({"allow_buffer_reuse": False, "reorder_for_peak_memory": False},
                            torch.compile(model, backend=offload_compiler.make_backend(policy="none"))),
}


def allocations():
    return torch.cuda.memory_stats()["allocation.all.allocated"]


def run(name, steps=5):
    PATCH[0], fn = VARIANTS[name]
    out = []
    for _ in range(steps):
        torch.cuda.synchronize()
        n0 = allocations()
        t0 = time.perf_counter()
        loss = fn(x, y)
        t1 = time.perf_counter()
        n1 = allocations()
        loss.backward()
        t2 = time.perf_counter()
        model.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        t3 = time.perf_counter()
        out.append(((t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t0) * 1e3, n1 - n0))
    return [statistics.median(v[i] for v in out) for i in range(4)]


names = list(VARIANTS)
for n in names:
    t = time.perf_counter()
    run(n, steps=3)
    run(n, steps=3)
    print(f"{n}: compiled and settled in {time.perf_counter() - t:.0f} s", flush=True)
got = {n: [] for n in names}
for r in range(8):
    for n in names[r % len(names):] + names[:r % len(names)]:
        got[n].append(run(n))
    print("round", r, {n: round(got[n][-1][0], 2) for n in names}, flush=True)
print(torch.__version__, torch.cuda.get_device_name())
print(f"{'compiled':22} {'fw host ms':>10} {'bw host ms':>10} {'step ms':>8} {'allocs fw':>9}  (medians of 8 rounds; fw host range)")
for n in names:
    med = [statistics.median(v[i] for v in got[n]) for i in range(4)]
    h = [v[0] for v in got[n]]
    print(f"{n:22} {med[0]:10.2f} {med[1]:10.2f} {med[2]:8.2f} {med[3]:9.0f}  ({min(h):.2f} to {max(h):.2f})")
