"""Session 34 (issue 18): where does ResNet-50's offload step go between the backend's
timed calls (28.3 ms for the plan in force) and the zoo row's steps (38.7 ms back to
back, 44.9 synced, against Inductor's 25.4 and 29.6)? For Inductor, the backend with
nothing moved (``policy="none"``) and ``"auto"`` (measured and re-planned as the zoo
row does, until ``settled``): per step, synchronised, the host's time to issue the
forward call, the loss and the backward, the GPU's time from the forward's call to the
backward's end (events), the time Python's garbage collector ran, the host pool's
allocations and releases; then 8 steps back to back. Throwaway probe, kept with its
results.

    PYTHONPATH=$PWD python benchmarks/results/2026-11-27_s34_step_probe.py MODEL [STRATEGY ...]
"""
import gc
import statistics
import sys
import time

sys.path.insert(0, "benchmarks")
import torch  # noqa: E402

import offload_compiler  # noqa: E402
from offload_compiler.runtime import host_pool  # noqa: E402
import zoo  # noqa: E402
import zoo_models  # noqa: E402

name = sys.argv[1]
strategies = sys.argv[2:] or ["inductor", "none", "auto"]
model, batch = getattr(zoo_models, name)()
model = model.to("cuda", getattr(torch, zoo.MODELS[name].dtype))
batch = [b.to("cuda") for b in batch]
gc_ms = [0.0]
_gc_t0 = [0.0]


def _gc(phase, info):
    if phase == "start":
        _gc_t0[0] = time.perf_counter()
    else:
        gc_ms[0] += 1e3 * (time.perf_counter() - _gc_t0[0])


gc.callbacks.append(_gc)


def loss_of(out):
    return out if out.dim() == 0 else out.float().mean()


def step(fn):
    loss_of(fn(*batch)).backward()
    model.zero_grad(set_to_none=True)


def probe(label, fn, backend=None):
    for _ in range(3):
        step(fn)
    settle = 0
    while backend is not None and not backend.settled and settle < 60:
        step(fn)
        settle += 1
    rows = []
    for _ in range(10):
        torch.cuda.synchronize()
        gc_ms[0], changes = 0.0, host_pool().changes
        e0, e1, e2 = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        t0 = time.perf_counter()
        e0.record()
        out = fn(*batch)
        e1.record()
        t1 = time.perf_counter()
        loss = loss_of(out)
        t2 = time.perf_counter()
        loss.backward()
        e2.record()
        t3 = time.perf_counter()
        torch.cuda.synchronize()
        t4 = time.perf_counter()
        model.zero_grad(set_to_none=True)
        rows.append((1e3 * (t1 - t0), 1e3 * (t2 - t1), 1e3 * (t3 - t2), e0.elapsed_time(e1), e1.elapsed_time(e2),
                     1e3 * (t4 - t0), gc_ms[0], host_pool().changes - changes))
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(8):
        step(fn)
    torch.cuda.synchronize()
    b2b = 1e3 * (time.perf_counter() - t0) / 8
    med = [statistics.median(c) for c in zip(*rows)]
    plans = backend.current_plans if backend is not None else []
    moved = f"{sum(len(p.offloaded) for p in plans)} offloaded, {sum(len(p.recomputed) for p in plans)} recomputed" if plans else ""
    print(f"{label:9s} host fw {med[0]:6.2f} loss {med[1]:5.2f} bw {med[2]:6.2f} | gpu fw {med[3]:6.2f} bw {med[4]:6.2f} | "
          f"synced {med[5]:6.2f} (min {min(r[5] for r in rows):.2f} max {max(r[5] for r in rows):.2f}) | gc {sum(r[6] for r in rows):6.2f} ms "
          f"over 10 | pool changes {sum(r[7] for r in rows)} | back to back {b2b:6.2f} | settle {settle} {moved}", flush=True)
    for r in rows:
        print("   ", " ".join(f"{x:7.2f}" for x in r), flush=True)


for s in strategies:
    torch._dynamo.reset()
    if s == "inductor":
        probe(s, torch.compile(model))
    else:
        opts = {"policy": "none", "replan": False} if s == "none" else {"memory_budget": s}
        b = offload_compiler.make_backend(**opts)
        probe(s, torch.compile(model, backend=b), b)
