"""Session 35 (issue 18): do the transfer ops slow the host's launches of the kernels
around them? First plans with transfer ops were fitted 25 to 36 us of host time per
kernel (ViT-B/16, sessions 34 and 35), their re-plans without any issued the same
forward kernels at about 19 us each; the fit charges the difference to the kernels, and
the re-plan's prediction then paces its host at the slower rate (+13.6% on ViT-B/16).

With the GPU held (``torch.cuda._sleep``) so the host is always ahead, each trial issues
300 small kernels (``add_`` on a 1 KiB tensor) and, every ``EVERY`` kernels, one of:
``none``; ``event`` (the cross-stream ordering of a copy without the copy: an event
recorded on the compute stream and waited for on the copy stream, one recorded there
and waited for on the compute stream); ``copy`` (a 28 MiB D2H copy into a pinned buffer
on the copy stream, no events); ``d2h`` (the ``offload::d2h`` op and its
``offload::release``, as a compiled graph calls them). Per trial: the host time per
kernel, less the time inside the inserted calls, and the time per inserted call.
Trials are interleaved (ABCD, ten rounds) so that a slow spell of the host falls on
every mode. Then each part of the d2h body alone, 500 calls.

    PYTHONPATH=$PWD python benchmarks/results/2026-11-27_s35_host_probe.py
"""
import statistics
import time

import torch

from offload_compiler.runtime import measure, ops, streams
from offload_compiler.runtime.pool import host_pool

dev = torch.device("cuda")
KERNELS, EVERY, ROUNDS = 300, 5, 10
small = torch.zeros(256, device=dev)
srcs = [torch.randn(96 * 197 * 768, device=dev, dtype=torch.bfloat16) for _ in range(KERNELS // EVERY)]
pinned = [torch.empty(s.numel(), dtype=s.dtype, pin_memory=True) for s in srcs]
compute = torch.cuda.current_stream(dev)
copy = streams.copy_stream(dev, streams.D2H)
cycles_ms = measure._cycles_per_ms(dev)
e1, e2 = torch.cuda.Event(), torch.cuda.Event()


def insert(mode, j, keep):
    if mode == "event":
        e1.record(compute)
        copy.wait_event(e1)
        e2.record(copy)
        compute.wait_event(e2)
    elif mode == "copy":
        with torch.cuda.stream(copy):
            pinned[j].copy_(srcs[j], non_blocking=True)
    elif mode == "d2h":
        host = ops.D2H(srcs[j], True)
        ops.RELEASE(srcs[j], host, small)
        keep.append(host)


def trial(mode):
    keep = []
    torch.cuda.synchronize()
    torch.cuda._sleep(int(200 * cycles_ms))  # the GPU stays behind the whole trial
    inside, j = 0.0, 0
    t0 = time.perf_counter()
    for i in range(KERNELS):
        small.add_(1)
        if mode != "none" and i % EVERY == 0:
            s = time.perf_counter()
            insert(mode, j, keep)
            inside += time.perf_counter() - s
            j += 1
    total = time.perf_counter() - t0
    torch.cuda.synchronize()
    del keep
    return 1e6 * (total - inside) / KERNELS, (1e6 * inside / j if j else 0.0)


modes = ("none", "event", "copy", "d2h")
for m in modes:  # warm-up: the pool's blocks, the streams, the events
    trial(m)
got = {m: [] for m in modes}
for _ in range(ROUNDS):
    for m in modes:
        got[m].append(trial(m))

print(f"{'mode':6} {'us/kernel median':>17} {'min':>6} {'max':>6} {'us/insert median':>17} {'min':>6}")
for m in modes:
    k = [a for a, _ in got[m]]
    o = [b for _, b in got[m]]
    print(f"{m:6} {statistics.median(k):17.2f} {min(k):6.2f} {max(k):6.2f} {statistics.median(o):17.2f} {min(o):6.2f}")
print("per round, us/kernel:", {m: [round(a, 1) for a, _ in got[m]] for m in modes})

# The d2h body's parts, each alone (GPU held, so nothing waits).
pool = host_pool()
src = srcs[0]


def timed(label, fn, n=500):
    torch.cuda.synchronize()
    torch.cuda._sleep(int(100 * cycles_ms))
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    dt = 1e6 * (time.perf_counter() - t0) / n
    torch.cuda.synchronize()
    print(f"  {label:34} {dt:7.2f} us")


def acquire_release():
    got = pool.acquire(src, pinned=True)
    del got


print("d2h body parts (us per call):")
timed("streams.current", lambda: streams.current(dev))
timed("pool.acquire (+ drop)", acquire_release)
timed("streams.follow", lambda: streams.follow(copy, compute))
timed("streams.mark_ready", lambda: streams.mark_ready(copy))
timed("on(copy) enter/leave", lambda: streams.on(copy, compute).__enter__() or streams.leave(compute, 0))
timed("copy_ non_blocking 28 MiB", lambda: pinned[0].copy_(src, non_blocking=True))
timed("copy_ non_blocking 4 KiB", lambda: pinned[0][:2048].copy_(src[:2048], non_blocking=True))
timed("torch.ops.offload.d2h + drop", lambda: ops.D2H(src, True), n=200)
timed("small.add_ (reference)", lambda: small.add_(1))
