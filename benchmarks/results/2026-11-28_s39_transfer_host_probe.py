"""Session 39 probe (issue 18): the host time of the transfer ops outside a measured call.

ResNet-50's measured forward issued in 22.6 ms with a plan of 88 transfer ops against
13.3 ms with none (command 2), and halving its allocations (Inductor's pool kept) did
not shorten it. This times, on the GPU machine, each op through the dispatcher (as the
compiled code calls it) and its Python body alone, per op, with no recorder active,
then profiles the d2h + release pair.
    python benchmarks/results/2026-11-28_s39_transfer_host_probe.py
"""
import cProfile
import pstats
import time

import torch

from offload_compiler.runtime import ops, streams

N = 64
dev = torch.device("cuda")
xs = [torch.randn(2 << 20, device=dev, dtype=torch.bfloat16) for _ in range(N)]  # 4 MiB each
anchor = torch.empty(1, device=dev)


def per_op_us(fn, reps=5):
    best = float("inf")
    for _ in range(reps):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    torch.cuda.synchronize()
    return best / N * 1e6


def d2h_release():
    for x in xs:
        h = torch.ops.offload.d2h.default(x, True)
        torch.ops.offload.release.default(x, h, anchor)


def d2h_only():
    global hosts
    hosts = [torch.ops.offload.d2h.default(x, True) for x in xs]


def bodies_d2h_release():
    for x in xs:
        h = ops.copy_to_host(x, True)
        ops.release_source(x, h)


def h2d_wait():
    for h in hosts:
        y = torch.ops.offload.h2d.default(h, anchor, "cuda", None)
        torch.ops.offload.wait.default(y)


def primitives():
    s = streams.copy_stream(dev, streams.D2H)
    c = torch.cuda.current_stream()
    rows = {}
    def t(name, f):
        rows[name] = per_op_us(lambda: [f() for _ in range(N)])
    t("aten.empty_like through the dispatcher", lambda: torch.ops.aten.empty_like.default(anchor))
    t("torch.cuda.Event()", torch.cuda.Event)
    e = torch.cuda.Event()
    t("event.record(stream)", lambda: e.record(s))
    t("stream.wait_event", lambda: c.wait_event(e))
    t("streams.current", lambda: streams.current(dev))
    t("with streams.on(s, compute)", lambda: streams.on(s, c).__enter__() or streams.leave(c, torch.cuda.current_device()))
    pinned = torch.empty(2 << 20, dtype=torch.bfloat16, pin_memory=True)
    t("pinned.copy_(x, non_blocking)", lambda: pinned.copy_(xs[0], non_blocking=True))
    return rows


for f in (d2h_release, d2h_only, bodies_d2h_release):  # warm the pool and the streams
    f()
rows = {
    "d2h + release, dispatched (us per pair)": per_op_us(d2h_release),
    "d2h + release, Python bodies (us per pair)": per_op_us(bodies_d2h_release),
}
d2h_only()
rows["h2d + wait, dispatched (us per pair)"] = per_op_us(h2d_wait)
rows.update(primitives())
prof = cProfile.Profile()
prof.enable()
for _ in range(5):
    d2h_release()
prof.disable()
torch.cuda.synchronize()
pstats.Stats(prof).sort_stats("tottime").print_stats(18)
print(torch.__version__, torch.cuda.get_device_name())
for k, v in rows.items():
    print(f"{v:8.1f} us  {k}")
