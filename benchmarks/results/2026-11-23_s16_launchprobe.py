"""Throwaway: do transfer ops make the host's other launches slower? The GPU is held by
a sleep kernel so the host never waits; per variant, N small kernels are launched with a
transfer-related action every M kernels; host time outside the actions, per kernel."""
import importlib, statistics, sys, time
import torch
sys.path.insert(0, ".")  # run from the repository root
from offload_compiler.runtime import streams
importlib.import_module("offload_compiler.runtime.ops")  # registers torch.ops.offload

dev = torch.device("cuda")
N, M = 400, 5
xs = [torch.randn(1 << 19, device=dev, dtype=torch.bfloat16) for _ in range(N // M + 1)]
y = torch.randn(1 << 16, device=dev)
d2h = streams.copy_stream(dev, streams.D2H)
compute = torch.cuda.current_stream(dev)
keep = []

def a_none(i): pass
def a_d2h_release(i):
    h = torch.ops.offload.d2h.default(xs[i], True); torch.ops.offload.release.default(xs[i], h, None); keep.append(h)
def a_d2h_only(i):
    keep.append(torch.ops.offload.d2h.default(xs[i], True))
def a_event_wait(i):  # compute waits for an event recorded on the copy stream
    e = torch.cuda.Event(); e.record(d2h); compute.wait_event(e); keep.append(e)
def a_side_wait_stream(i):  # copy stream waits for compute (what d2h does first)
    d2h.wait_stream(compute)
def a_side_copy(i):  # a copy on the side stream, no cross-stream waits
    h = torch.empty(xs[i].shape, dtype=xs[i].dtype, pin_memory=True) if len(keep) < 200 else keep[i % 200]
    torch.cuda.set_stream(d2h); h.copy_(xs[i], non_blocking=True); torch.cuda.set_stream(compute); keep.append(h)
def a_set_stream(i):
    torch.cuda.set_stream(d2h); torch.cuda.set_stream(compute)
def a_python_60us(i):  # pure Python busy work of about the d2h body's length
    t = time.perf_counter()
    while time.perf_counter() - t < 60e-6: pass

VARIANTS = [a_none, a_d2h_release, a_d2h_only, a_event_wait, a_side_wait_stream, a_side_copy, a_set_stream, a_python_60us]
rows = []
for rep in range(3):
    for fn in VARIANTS:
        keep.clear()
        torch.cuda.synchronize()
        torch.cuda._sleep(int(3e8))  # hold the GPU ~ 150+ ms
        outside = 0.0
        inside = 0.0
        t0 = time.perf_counter()
        for i in range(N):
            t = time.perf_counter()
            y.mul_(1.0001)
            outside += time.perf_counter() - t
            if i % M == 0:
                t = time.perf_counter()
                fn(i // M)
                inside += time.perf_counter() - t
        total = time.perf_counter() - t0
        torch.cuda.synchronize()
        if rep > 0:
            rows.append((fn.__name__, outside / N * 1e6, inside / (N // M) * 1e6, total * 1e3))
by = {}
for name, o, ins, tot in rows:
    by.setdefault(name, []).append((o, ins, tot))
print(f"{'action every %d kernels' % M:28s} {'us/launch outside':>18s} {'us/action':>10s} {'total ms':>9s}")
for name, vals in by.items():
    print(f"{name:28s} {statistics.median(v[0] for v in vals):18.2f} {statistics.median(v[1] for v in vals):10.1f} {statistics.median(v[2] for v in vals):9.2f}")
