"""Session 39 probe (issue 18): the transfer ops called without the dispatcher.

Times, on the GPU machine, a ``d2h`` + ``release`` pair and an ``h2d`` + ``wait`` pair
through the dispatcher (``torch.ops.offload.<op>.default``, as Inductor's code called
them before) and directly (``<op>.default._offload_direct``, as it calls them now),
interleaved over rounds, with no recorder active; then checks that Inductor's code for a
CUDA graph with transfer ops calls them directly on this torch.
    python benchmarks/results/2026-11-28_s39_direct_probe.py
"""
import statistics
import time

import torch
from torch._inductor.utils import run_and_get_code
from torch.fx.experimental.proxy_tensor import make_fx

from offload_compiler import lowering
from offload_compiler.runtime import ops

N, ROUNDS = 64, 9
dev = torch.device("cuda")
xs = [torch.randn(2 << 20, device=dev, dtype=torch.bfloat16) for _ in range(N)]  # 4 MiB each
anchor = torch.empty(1, device=dev)
D = {name: getattr(torch.ops.offload, name).default for name in ("d2h", "release", "h2d", "wait")}
DIRECT = {name: getattr(op, ops.DIRECT) for name, op in D.items()}


def pairs(fns):
    hosts = []
    for x in xs:
        h = fns["d2h"](x, True)
        fns["release"](x, h, anchor)
        hosts.append(h)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for x in xs:
        h = fns["d2h"](x, True)
        fns["release"](x, h, anchor)
    fw = time.perf_counter() - t
    torch.cuda.synchronize()
    t = time.perf_counter()
    for h in hosts:
        y = fns["h2d"](h, anchor, "cuda", None)
        fns["wait"](y)
    bw = time.perf_counter() - t
    torch.cuda.synchronize()
    return fw / N * 1e6, bw / N * 1e6


rows = {"dispatched": [], "direct": []}
for _ in range(ROUNDS):
    rows["dispatched"].append(pairs(D))
    rows["direct"].append(pairs(DIRECT))


def copies(host, src, a, w):
    x = torch.ops.offload.h2d(host, a, "cuda", None)
    src_host = torch.ops.offload.d2h(src, True)
    s = torch.mm(a, w).sum()
    torch.ops.offload.wait(x)
    torch.ops.offload.release(src, src_host, s)
    return x * s, src_host


args = [torch.randn(64, 64, pin_memory=True), torch.randn(64, 64, device=dev),
        torch.randn(64, 64, device=dev), torch.randn(64, 64, device=dev)]
gm = make_fx(copies)(*args)
out, (code,) = run_and_get_code(lambda: lowering.compile_inner(gm, list(args))(list(args)))
ref = copies(*args)
same = torch.equal(out[1], ref[1]) and torch.allclose(out[0], ref[0])
calls = [line.strip() for line in code.splitlines() if "torch.ops.offload" in line and "(" in line
         and not line.strip().startswith(("#", "assert"))]
print(torch.__version__, torch.cuda.get_device_name())
print("\n".join(calls))
print(f"compiled graph: {sum(ops.DIRECT in c for c in calls)} of {len(calls)} transfer calls direct; result as eager: {same}")
print(f"{'path':12s} {'d2h+release us (median, min-max)':34s} {'h2d+wait us (median, min-max)'}")
for k, v in rows.items():
    fw, bw = [x[0] for x in v], [x[1] for x in v]
    print(f"{k:12s} {statistics.median(fw):7.1f} ({min(fw):.1f}-{max(fw):.1f})"
          f"{'':16s} {statistics.median(bw):7.1f} ({min(bw):.1f}-{max(bw):.1f})")
