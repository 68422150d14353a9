"""Throwaway: where the host time of a transfer op's body goes (GPU). Each part timed on
its own over N calls (perf_counter, no sync), 1 MiB bf16 tensors; then a forward-like
pattern (K d2h kept, then K h2d+wait, then all dropped) through the real bodies."""
import statistics, sys, time
import torch
sys.path.insert(0, ".")  # run from the repository root
from offload_compiler.runtime import ops, streams, chain
from offload_compiler.runtime.pool import host_pool

N = 400
dev = torch.device("cuda")
src = torch.randn(512, 1024, device=dev, dtype=torch.bfloat16)
torch.cuda.synchronize()
rows = []

def timed(name, fn, n=N, setup=None):
    xs = []
    for i in range(n):
        arg = setup() if setup else None
        t = time.perf_counter()
        fn(arg)
        xs.append(time.perf_counter() - t)
    torch.cuda.synchronize()
    rows.append((name, statistics.median(xs) * 1e6, statistics.mean(xs) * 1e6))

like = torch.empty_strided(src.shape, src.stride(), dtype=src.dtype, device="meta")
compute = torch.cuda.current_stream(dev)
d2h = streams.copy_stream(dev, streams.D2H)
keep = []
timed("empty_strided meta", lambda _: torch.empty_strided(src.shape, list(src.stride()), dtype=src.dtype, device="meta"))
timed("_dense", lambda _: ops._dense(src))
timed("current_stream", lambda _: torch.cuda.current_stream(dev))
timed("copy_stream", lambda _: streams.copy_stream(dev, streams.D2H))
timed("wait_stream", lambda _: d2h.wait_stream(compute))
ev_re = torch.cuda.Event()
def wait_re(_):
    ev_re.record(compute); d2h.wait_event(ev_re)
timed("wait_stream with one reused event", wait_re)
timed("streams.current", lambda _: streams.current(dev))
timed("Event()+record", lambda _: streams.mark_ready(d2h))
ev = streams.mark_ready(d2h)
timed("wait_event", lambda _: d2h.wait_event(ev))
def on(_):
    with streams.on(d2h, compute):
        pass
timed("streams.on enter/exit", on)
def acq(_):
    got = host_pool().acquire(like, pinned=True)
    keep.append(got[0])
timed("pool.acquire (drop 1 by 1)", lambda _: keep.clear() or acq(_))
keep.clear()
host = host_pool().acquire(like, pinned=True)[0]
def cp(_):
    torch.cuda.set_stream(d2h); host.copy_(src, non_blocking=True); torch.cuda.set_stream(compute)
timed("copy_ d2h pinned non_blocking (+2 set_stream)", cp)
timed("set_stream x2", lambda _: (torch.cuda.set_stream(d2h), torch.cuda.set_stream(compute)))
timed("pool.lookup", lambda _: host_pool().lookup(host))
timed("empty_strided cuda", lambda _: torch.empty_strided(src.shape, src.stride(), dtype=src.dtype, device=dev))
out = torch.empty_like(src)
h2d = streams.copy_stream(dev, streams.H2D)
def cpb(_):
    torch.cuda.set_stream(h2d); out.copy_(host, non_blocking=True); torch.cuda.set_stream(compute)
timed("copy_ h2d pinned non_blocking (+2 set_stream)", cpb)
timed("untyped_storage().data_ptr()", lambda _: out.untyped_storage().data_ptr())
timed("chain.note", lambda _: chain.note("d2h", src, host))
timed("body copy_to_host (drop 1 by 1)", lambda _: keep.clear() or keep.append(ops.copy_to_host(src, True)))
keep.clear()
timed("op torch.ops.offload.d2h (drop 1 by 1)", lambda _: keep.clear() or keep.append(torch.ops.offload.d2h.default(src, True)))
keep.clear()
for K in (8, 32, 96):
    xs_d, xs_r, xs_h, xs_w = [], [], [], []
    srcs = [torch.randn(512, 1024, device=dev, dtype=torch.bfloat16) for _ in range(K)]
    for rep in range(20):
        torch.cuda.synchronize()
        hosts = []
        for s in srcs:
            t = time.perf_counter(); hosts.append(torch.ops.offload.d2h.default(s, True)); xs_d.append(time.perf_counter() - t)
            t = time.perf_counter(); torch.ops.offload.release.default(s, hosts[-1], None); xs_r.append(time.perf_counter() - t)
        devs = []
        for h in hosts:
            t = time.perf_counter(); devs.append(torch.ops.offload.h2d.default(h, None, "cuda", None)); xs_h.append(time.perf_counter() - t)
            t = time.perf_counter(); torch.ops.offload.wait.default(devs[-1]); xs_w.append(time.perf_counter() - t)
        del hosts, devs
    for name, xs in (("d2h", xs_d), ("release", xs_r), ("h2d", xs_h), ("wait", xs_w)):
        rows.append((f"pattern K={K} op {name}", statistics.median(xs) * 1e6, statistics.mean(xs) * 1e6))
print(f"{'part':50s} {'median us':>10s} {'mean us':>10s}")
for name, med, mean in rows:
    print(f"{name:50s} {med:10.1f} {mean:10.1f}")
