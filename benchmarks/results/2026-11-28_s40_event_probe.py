"""Session 40 probe (issue 18): the transfer ops' bodies with the host block's own
events (``HostBlock.mark``: one event per block, direction and device, recorded again
instead of a new one per copy; the wait on the copy that last filled a block skipped
where the same D2H stream issued it; the block's typed view kept).

Times, on the GPU machine, a ``d2h`` + ``release`` pair and an ``h2d`` + ``wait`` pair
called directly (as Inductor's code calls them), with the bodies as session 39 left them
(``old``: a new event per copy, every wait queued; patched in here from that code) and
as they are now (``new``), interleaved over rounds, no recorder active. The pool's other
change (the block's size a field, not a property) is in both. Then checks that the
values survive a round trip with both.
    python benchmarks/results/2026-11-28_s40_event_probe.py
"""
import statistics
import time

import torch

from offload_compiler.runtime import chain, measure, ops, streams
from offload_compiler.runtime.pool import host_pool

N, ROUNDS = 64, 11
dev = torch.device("cuda")
xs = [torch.randn(2 << 20, device=dev, dtype=torch.bfloat16) for _ in range(N)]  # 4 MiB each
anchor = torch.empty(1, device=dev)
F = {name: getattr(getattr(torch.ops.offload, name).default, ops.DIRECT) for name in ("d2h", "release", "h2d", "wait")}
NEW = (ops._d2h_cuda, ops.issue_copy_to_device)


def old_d2h_cuda(src, like):  # session 39's body (5422b6d)
    compute = streams.current(src.device)
    got = host_pool().acquire(like, pinned=True)
    if got is None:
        return ops._device_copy(src, like)
    host, block = got
    stream = streams.copy_stream(src.device, streams.D2H)
    streams.follow(stream, compute)
    for event in block.events:
        stream.wait_event(event)
    if block.ready_event is not None:
        stream.wait_event(block.ready_event)
    with streams.on(stream, compute):
        host.copy_(src, non_blocking=True)
    done = streams.mark_ready(stream)
    block.events = []
    block.ready_event = done
    chain.note("d2h", src, host)
    return host


def old_issue_copy_to_device(host, target, stride):  # session 39's body (5422b6d)
    stride = host.stride() if stride is None else stride
    out = torch.empty_strided(host.size(), stride, dtype=host.dtype, device=target)
    compute = streams.current(target)
    stream = streams.copy_stream(target, streams.H2D)
    streams.follow(stream, compute)
    block = host_pool().lookup(host)
    if block is not None and block.ready_event is not None:
        stream.wait_event(block.ready_event)
    with streams.on(stream, compute):
        out.copy_(host, non_blocking=True)
    done = streams.mark_ready(stream)
    if block is not None:
        block.events.append(done)
    ops._pending[out.untyped_storage().data_ptr()] = done
    return out


def pairs(bodies):
    ops._d2h_cuda, ops.issue_copy_to_device = bodies
    try:
        hosts = []
        for x in xs:  # the blocks of this round, filled once
            h = F["d2h"](x, True)
            F["release"](x, h, anchor)
            hosts.append(h)
        hosts.clear()
        torch.cuda.synchronize()
        t = time.perf_counter()
        for x in xs:  # taken again: each block was last filled by the D2H stream
            h = F["d2h"](x, True)
            F["release"](x, h, anchor)
            hosts.append(h)
        fw = time.perf_counter() - t
        torch.cuda.synchronize()
        t = time.perf_counter()
        outs = []
        for h in hosts:
            y = F["h2d"](h, anchor, "cuda", None)
            F["wait"](y)
            outs.append(y)
        bw = time.perf_counter() - t
        torch.cuda.synchronize()
        same = all(torch.equal(x, y) for x, y in zip(xs, outs))
    finally:
        ops._d2h_cuda, ops.issue_copy_to_device = NEW
    return fw / N * 1e6, bw / N * 1e6, same


assert measure.active is None
rows = {"old": [], "new": []}
for r in range(ROUNDS):
    for name in (("old", "new") if r % 2 == 0 else ("new", "old")):
        rows[name].append(pairs((old_d2h_cuda, old_issue_copy_to_device) if name == "old" else NEW))
print(torch.__version__, torch.cuda.get_device_name())
print(f"{'bodies':8s} {'d2h+release us (median, min-max)':34s} {'h2d+wait us (median, min-max)':32s} values")
for k, v in rows.items():
    fw, bw = [x[0] for x in v], [x[1] for x in v]
    print(f"{k:8s} {statistics.median(fw):7.1f} ({min(fw):.1f}-{max(fw):.1f}){'':16s} "
          f"{statistics.median(bw):7.1f} ({min(bw):.1f}-{max(bw):.1f}){'':14s} {all(x[2] for x in v)}")
