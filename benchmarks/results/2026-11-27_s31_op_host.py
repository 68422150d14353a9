"""Session 31 (issue 18): the host time of each transfer op, called as Inductor's
generated code calls it (through the dispatcher), and of each step inside it. Throwaway
probe, kept with the results it made.

    PYTHONPATH=$PWD python benchmarks/results/2026-11-27_s31_op_host.py

Each line: microseconds of host time per call, the least and the most of three rounds of
400 calls (the GPU runs the copies meanwhile; nothing waits for it inside a round).
"""
import time

import torch

from offload_compiler.runtime import ops, streams
from offload_compiler.runtime.pool import host_pool

dev = torch.device("cuda")
x = torch.randn(4096, 1024, device=dev, dtype=torch.bfloat16)  # 8 MiB, an activation's size
N = 400
lib = torch.library.Library("s31probe", "DEF")
lib.define("noop(Tensor x) -> ()")
lib.impl("noop", lambda t: None, "CompositeExplicitAutograd")
NOOP = torch.ops.s31probe.noop.default
D2H, RELEASE, H2D, WAIT = ops.D2H, ops.RELEASE, ops.H2D, ops.WAIT
rows = []


def bench(name, fn):
    fn()
    torch.cuda.synchronize()
    took = []
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(N):
            fn()
        took.append((time.perf_counter() - t) / N * 1e6)
        torch.cuda.synchronize()
    rows.append((name, min(took), max(took)))


def cycle():
    h = D2H(x, True)
    RELEASE(x, h, None)
    y = H2D(h, None, "cuda", None)
    WAIT(y)


held = {}


def d2h_only():
    held["h"] = D2H(x, True)


def release_only():
    RELEASE(x, held["h"], None)


def h2d_only():
    held["y"] = H2D(held["h"], None, "cuda", None)


def wait_only():
    ops.put_pending(held["y"], streams.mark_ready(c))
    WAIT(held["y"])


c = streams.current(dev)
s = streams.copy_stream(dev, streams.D2H)
pool = host_pool()
h0 = D2H(x, True)
bench("4 ops: d2h, release, h2d, wait", cycle)
bench("d2h (op)", d2h_only)
bench("release (op)", release_only)
bench("h2d (op)", h2d_only)
bench("wait (op, with mark_ready)", wait_only)
bench("body copy_to_host", lambda: ops.copy_to_host(x, True))
bench("body release_source", lambda: ops.release_source(x, h0))
bench("body copy_to_device", lambda: ops.copy_to_device(h0, None, "cuda", None))
bench("dispatcher round trip (no-op op)", lambda: NOOP(x))
bench("_dense", lambda: ops._dense(x))
bench("streams.current", lambda: streams.current(dev))
bench("pool.acquire (pinned) + drop", lambda: pool.acquire(x, pinned=True))
bench("pool.lookup", lambda: pool.lookup(h0))
bench("stream.wait_stream(compute)", lambda: s.wait_stream(c))
ev = torch.cuda.Event()
bench("event.record + wait_event (reused)", lambda: (ev.record(c), s.wait_event(ev)))
bench("torch.cuda.Event() + record", lambda: streams.mark_ready(s))


def on_only():
    with streams.on(s, c):
        pass


bench("streams.on (enter + exit)", on_only)


def enter_leave():
    device = streams.enter(s)
    streams.leave(c, device)


if hasattr(streams, "enter"):  # the code after 2026-11-27_s31: the switches made directly
    bench("streams.enter + leave", enter_leave)
    bench("streams.follow (reused event)", lambda: streams.follow(s, c))


def set_twice():
    torch.cuda.set_stream(s)
    torch.cuda.set_stream(c)


bench("torch.cuda.set_stream x2", set_twice)
bench("torch.cuda.current_device", torch.cuda.current_device)


def copy_on():
    with streams.on(s, c):
        h0.copy_(x, non_blocking=True)


bench("copy_ D2H non_blocking (in on)", copy_on)
bench("empty_strided cuda", lambda: torch.empty_strided(x.size(), x.stride(), dtype=x.dtype, device=dev))
bench("untyped_storage().data_ptr()", lambda: x.untyped_storage().data_ptr())
bench("perf_counter x2", lambda: (time.perf_counter(), time.perf_counter()))
print(f"{'what':42s} {'min us':>8s} {'max us':>8s}")
for name, lo, hi in rows:
    print(f"{name:42s} {lo:8.1f} {hi:8.1f}")
