"""Session 40 probe (issue 18): after the transfer ops are called without the dispatcher
(session 39), how much of the host time an offload plan adds to ResNet-50's forward is
still outside the ops' bodies?

Session 36's probe (``2026-11-28_s36_ablation_probe.py``) found about 3 ms of the first
plan's 4.6 ms over Inductor's forward left with every body emptied, when Inductor's code
still called the ops through the dispatcher. Here, in one process: Inductor; the backend
with nothing moved; ResNet-50's first ``"auto"`` plan kept (re-planning off) as built;
the same plan with ``d2h`` only taking a pooled block and ``release`` a no-op (timing
only: the gradients are wrong there). Ten interleaved rounds of 5 synchronised steps
each; medians of the host's time to issue the forward and the step, and the forward's
GPU time (events on the compute stream).

    PYTHONPATH=$PWD python benchmarks/results/2026-11-28_s40_ablation_probe.py
"""
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import offload_compiler  # noqa: E402
from benchmarks.zoo_models import resnet50  # noqa: E402
from offload_compiler.runtime import ops  # noqa: E402
from offload_compiler.runtime.pool import host_pool  # noqa: E402

model, (x, y) = resnet50()
model = model.cuda()
x, y = x.cuda().contiguous(memory_format=torch.channels_last), y.cuda()
inductor = torch.compile(model)
nothing = torch.compile(model, backend=offload_compiler.make_backend(policy="none"))
offload = torch.compile(model, backend=offload_compiler.make_backend(replan=False))
original = ops._d2h_cuda, ops.release_source


def d2h_pool_only(src, like):
    host, block = host_pool().acquire(like, pinned=True)
    block.events, block.ready_event = [], None
    return host


VARIANTS = {
    "inductor": (inductor, original),
    "nothing moved": (nothing, original),
    "plan as built": (offload, original),
    "plan, bodies empty": (offload, (d2h_pool_only, lambda src, host: None)),
}


def run(name, steps=5):
    fn, (d2h, release) = VARIANTS[name]
    ops._d2h_cuda, ops.release_source = d2h, release
    host_fw, gpu_fw, host_step = [], [], []
    try:
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
    finally:
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
print(torch.__version__, torch.cuda.get_device_name())
print(f"{'variant':20} {'forward host ms':>16} {'forward GPU ms':>15} {'step host ms':>13}  (medians of 10 rounds; range of forward host)")
for n in names:
    h = [v[0] for v in got[n]]
    print(f"{n:20} {statistics.median(h):16.2f} {statistics.median(v[1] for v in got[n]):15.2f} "
          f"{statistics.median(v[2] for v in got[n]):13.2f}  ({min(h):.2f} to {max(h):.2f})")
