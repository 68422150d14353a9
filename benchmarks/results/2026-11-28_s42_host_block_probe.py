"""Session 42 probe (issue 18): does a plan that offloads make the host wait for the GPU
in the forward, or only spend longer issuing it?

ViT-B/16 (``benchmarks/zoo_models.py:vit``; ``MODEL=resnet50`` for ResNet-50), in one
process: the backend with nothing moved, and a plan that offloads (``memory_budget``
0.85, re-planning off). Per variant, after warm-up: the host's time to issue the forward
from an idle GPU, and with the GPU held busy for 60 ms first (``torch.cuda._sleep``): a
host that never waits for the GPU issues the forward as fast either way; a host that
waits takes the held time more. Then the transfer op bodies' time each (the longest
call, and all of them), and one forward under cProfile (the top functions by own time).

    PYTHONPATH=$PWD python benchmarks/results/2026-11-28_s42_host_block_probe.py
"""
import cProfile
import io
import os
import pstats
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import offload_compiler  # noqa: E402
from benchmarks import zoo_models  # noqa: E402
from offload_compiler.runtime import ops  # noqa: E402

model, (x, y) = getattr(zoo_models, os.environ.get("MODEL", "vit"))()
model = model.cuda()
x, y = x.cuda(), y.cuda()
VARIANTS = {
    "nothing moved": torch.compile(model, backend=offload_compiler.make_backend(policy="none")),
    "offload 0.85": torch.compile(model, backend=offload_compiler.make_backend(memory_budget=0.85, replan=False)),
}
bodies = {}
for name in ("_d2h_cuda", "release_source", "issue_copy_to_device"):
    inner = getattr(ops, name)

    def timed(*args, _inner=inner, _name=name):
        t0 = time.perf_counter()
        try:
            return _inner(*args)
        finally:
            bodies.setdefault(_name, []).append((time.perf_counter() - t0) * 1e3)
    setattr(ops, name, timed)
# The op kernels call these bodies through this module's globals, so the wrappers above
# run (``wait_for_copy`` is registered as the kernel itself: not counted here).

SLEEP_CYCLES = int(float(os.environ.get("HOLD_MS", "60")) * 1.98e6)  # ~1.98 GHz SM clock


def step(fn, hold=False):
    torch.cuda.synchronize()
    if hold:
        torch.cuda._sleep(SLEEP_CYCLES)
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
    return (t1 - t0) * 1e3, a.elapsed_time(b), (t2 - t1) * 1e3


for name, fn in VARIANTS.items():
    for _ in range(4):
        step(fn)
print(torch.__version__, torch.cuda.get_device_name(), os.environ.get("MODEL", "vit"))
print(f"{'variant':15} {'fw host idle':>12} {'fw GPU':>8} {'bw host':>8} {'fw host held':>13} {'fw GPU held':>12}")
for name, fn in VARIANTS.items():
    bodies.clear()
    idle = [step(fn) for _ in range(6)]
    n_ops = {k: len(v) for k, v in bodies.items()}
    body = {k: (sum(v) / 6, max(v)) for k, v in bodies.items()}
    held = [step(fn, hold=True) for _ in range(6)]
    med = lambda rows, i: statistics.median(r[i] for r in rows)  # noqa: E731
    print(f"{name:15} {med(idle, 0):12.2f} {med(idle, 1):8.2f} {med(idle, 2):8.2f} {med(held, 0):13.2f} "
          f"{med(held, 1):12.2f}")
    for k in body:
        print(f"    {k:22} {n_ops[k] / 6:5.0f} calls/step  {body[k][0]:7.2f} ms/step  longest {body[k][1]:6.3f} ms")
    for hold in (False, True):
        torch.cuda.synchronize()
        if hold:
            torch.cuda._sleep(SLEEP_CYCLES)
        prof = cProfile.Profile()
        prof.enable()
        loss = fn(x, y)
        prof.disable()
        loss.backward()
        model.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(14)
        print(f"  cProfile, forward, {'GPU held' if hold else 'idle GPU'}:")
        print("\n".join("    " + line for line in out.getvalue().splitlines()[4:] if line.strip())[:3500])
