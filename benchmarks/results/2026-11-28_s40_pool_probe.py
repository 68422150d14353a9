"""Session 40 probe (issue 18): does Inductor's buffer pool, off for graphs with transfer
ops since session 36, cost ResNet-50's first plan its host time? Session 39 compared a
pooled plan with an unpooled one on two machines (host levels 2x apart) and with two
different plans; here the same plan runs both ways in one process.

Variants, in one process, rounds interleaved: Inductor; the backend with nothing moved;
ResNet-50's first ``"auto"`` plan kept (re-planning off) compiled as the backend does
(no buffer pool); the same plan compiled with Inductor's buffer pool and its own guard
(``allow_buffer_reuse`` left on: what the backend did before session 36); and the first
with ``d2h`` only taking a pooled block and ``release`` a no-op (timing only: its
gradients are wrong). Each a separate ``torch.compile`` of the model. Ten rounds of 5
synchronised steps each; medians of the host's time to issue the forward and the step,
the forward's GPU time, and the device allocations of a forward and of a step
(``torch.cuda.memory_stats``'s ``allocation.all.allocated``).

    PYTHONPATH=$PWD python benchmarks/results/2026-11-28_s40_pool_probe.py
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
from offload_compiler.runtime import ops  # noqa: E402
from offload_compiler.runtime.pool import host_pool  # noqa: E402

POOLED = [False]
compile_inner = lowering.compile_inner


def compile_inner_maybe_pooled(gm, example_inputs, **kwargs):
    """The backend's compile_inner; with POOLED set, Inductor's buffer pool stays on."""
    if not POOLED[0]:
        return compile_inner(gm, example_inputs, **kwargs)
    from torch._inductor import config
    from torch._inductor.compile_fx import compile_fx_inner
    from passes.nodes import is_transfer
    patches = {}
    if any(is_transfer(n) for n in gm.graph.nodes):
        patches = {"reorder_for_peak_memory": False,
                   "_post_fusion_custom_pass": lowering._transfer_pass(config._post_fusion_custom_pass)}
    with config.patch(patches):
        return compile_fx_inner(gm, example_inputs, **kwargs)


lowering.compile_inner = compile_inner_maybe_pooled
# Each variant compiled afresh: a cached graph of one would be served to the other.
torch._inductor.config.fx_graph_cache = False
torch._functorch.config.enable_autograd_cache = False
model, (x, y) = resnet50()
model = model.cuda()
x, y = x.cuda().contiguous(memory_format=torch.channels_last), y.cuda()
inductor = torch.compile(model)
nothing = torch.compile(model, backend=offload_compiler.make_backend(policy="none"))
plan = torch.compile(model, backend=offload_compiler.make_backend(replan=False))
pooled = torch.compile(model, backend=offload_compiler.make_backend(replan=False))
original = ops._d2h_cuda, ops.release_source


def d2h_pool_only(src, like):
    host, block = host_pool().acquire(like, pinned=True)
    block.events, block.ready_event = [], None
    return host


VARIANTS = {  # name: (compiled, pooled, bodies)
    "inductor": (inductor, False, original),
    "nothing moved": (nothing, False, original),
    "plan, no pool": (plan, False, original),
    "plan, pool": (pooled, True, original),
    "plan, no pool, empty": (plan, False, (d2h_pool_only, lambda src, host: None)),
}


def allocations():
    return torch.cuda.memory_stats()["allocation.all.allocated"]


def run(name, steps=5):
    fn, POOLED[0], (d2h, release) = VARIANTS[name]
    ops._d2h_cuda, ops.release_source = d2h, release
    host_fw, gpu_fw, host_step, alloc_fw, alloc_step = [], [], [], [], []
    try:
        for _ in range(steps):
            torch.cuda.synchronize()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            n0 = allocations()
            t0 = time.perf_counter()
            a.record()
            loss = fn(x, y)
            b.record()
            t1 = time.perf_counter()
            n1 = allocations()
            loss.backward()
            t2 = time.perf_counter()
            model.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            host_fw.append((t1 - t0) * 1e3)
            gpu_fw.append(a.elapsed_time(b))
            host_step.append((t2 - t0) * 1e3)
            alloc_fw.append(n1 - n0)
            alloc_step.append(allocations() - n0)
    finally:
        ops._d2h_cuda, ops.release_source = original
        POOLED[0] = False
    return tuple(statistics.median(v) for v in (host_fw, gpu_fw, host_step, alloc_fw, alloc_step))


names = list(VARIANTS)
for n in names:
    t = time.perf_counter()
    for _ in range(2):
        run(n, steps=4)  # compile, settle
    print(f"{n}: compiled and settled in {time.perf_counter() - t:.0f} s", flush=True)
got = {n: [] for n in names}
for r in range(10):
    for n in names[r % len(names):] + names[:r % len(names)]:
        got[n].append(run(n))
print(torch.__version__, torch.cuda.get_device_name())
print(f"{'variant':22} {'fw host ms':>10} {'fw GPU ms':>10} {'step host ms':>12} {'allocs fw':>9} {'allocs step':>11}"
      "  (medians of 10 rounds; range of fw host)")
for n in names:
    h = [v[0] for v in got[n]]
    med = [statistics.median(v[i] for v in got[n]) for i in range(5)]
    print(f"{n:22} {med[0]:10.2f} {med[1]:10.2f} {med[2]:12.2f} {med[3]:9.0f} {med[4]:11.0f}"
          f"  ({min(h):.2f} to {max(h):.2f})")
