"""Session 36 (issue 18): which part of the forward's transfer ops slows the host's issue
of ResNet-50's forward? ResNet-50's first "auto" plan (22 offloaded; re-planning off)
issued its forward in 24.5 ms against 8.9 ms for its re-plan without transfers, of which
its 44 forward transfer ops' bodies took about 4.6 ms (command 1). A concurrent DMA alone
does not slow launches (command 3) and no CUDA runtime call blocks (command 5).

Here, in one process, the plan's forward is timed (host: issue time; GPU: events on the
compute stream) with parts of the ops' bodies removed by patching the module (a probe of
timing only: the gradients are wrong in B to D): A as built; B ``d2h`` without its copy
call (its events and stream switches kept); C ``d2h`` only takes a pooled host block (no
stream, event or copy); D as C and ``release`` a no-op; and Inductor's own forward.
Ten interleaved rounds of 5 steps each, medians.

    PYTHONPATH=$PWD python benchmarks/results/2026-11-28_s36_ablation_probe.py
"""
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import offload_compiler  # noqa: E402
from benchmarks.zoo_models import resnet50  # noqa: E402
from offload_compiler.runtime import ops, streams  # noqa: E402
from offload_compiler.runtime.pool import host_pool  # noqa: E402

model, (x, y) = resnet50()
model = model.cuda()
x, y = x.cuda().contiguous(memory_format=torch.channels_last), y.cuda()
inductor = torch.compile(model)
offload = torch.compile(model, backend=offload_compiler.make_backend(replan=False))
original = ops._d2h_cuda, ops.release_source


def d2h_no_copy(src, like):
    compute = streams.current(src.device)
    host, block = host_pool().acquire(like, pinned=True)
    stream = streams.copy_stream(src.device, streams.D2H)
    streams.follow(stream, compute)
    for event in block.events:
        stream.wait_event(event)
    if block.ready_event is not None:
        stream.wait_event(block.ready_event)
    with streams.on(stream, compute):
        pass
    block.events, block.ready_event = [], streams.mark_ready(stream)
    return host


def d2h_pool_only(src, like):
    host, block = host_pool().acquire(like, pinned=True)
    block.events, block.ready_event = [], None
    return host


VARIANTS = {
    "A as built": (offload, original),
    "B d2h without copy": (offload, (d2h_no_copy, original[1])),
    "C d2h pool only": (offload, (d2h_pool_only, original[1])),
    "D C + release no-op": (offload, (d2h_pool_only, lambda src, host: None)),
    "inductor": (inductor, original),
}


def run(name, steps=5):
    fn, (d2h, release) = VARIANTS[name]
    ops._d2h_cuda, ops.release_source = d2h, release
    host_fw, gpu_fw, host_step = [], [], []
    for _ in range(steps):
        torch.cuda.synchronize()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        a.record()
        loss = fn(x, y)
        b.record()
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        model.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        host_fw.append((t1 - t0) * 1e3)
        gpu_fw.append(a.elapsed_time(b))
        host_step.append((t2 - t0) * 1e3)
    ops._d2h_cuda, ops.release_source = original
    return statistics.median(host_fw), statistics.median(gpu_fw), statistics.median(host_step)


names = list(VARIANTS)
for n in names:
    for _ in range(2):
        run(n, steps=4)  # compile, settle
got = {n: [] for n in names}
for r in range(10):
    for n in names[r % len(names):] + names[:r % len(names)]:
        got[n].append(run(n))
print(f"{'variant':22} {'forward host ms':>16} {'forward GPU ms':>15} {'step host ms':>13}  (medians of 10 rounds; range of forward host)")
for n in names:
    h = [v[0] for v in got[n]]
    print(f"{n:22} {statistics.median(h):16.2f} {statistics.median(v[1] for v in got[n]):15.2f} "
          f"{statistics.median(v[2] for v in got[n]):13.2f}  ({min(h):.2f} to {max(h):.2f})")
