"""Session 36 (issue 18): do copies over PCIe slow the host's kernel launches when the
GPU is not held? First plans with D2H copies issued their forward 1.6x (ViT-B/16) and
2.2x (ResNet-50) slower per kernel than their re-plans without copies, in one process a
few seconds apart (command 1). Session 35's probe found no such slowdown with the GPU
held by a sleep, so that the GPU read no commands while the host issued them.

Part 1, 2000 small kernels (``add_`` on 1 KiB) issued back to back, the GPU free to run
them as they come (the host sets the pace), while the side stream runs: nothing; a 1 GiB
D2H copy into pinned memory; a 1 GiB H2D copy; a 1 GiB device-to-device copy (side
stream work without PCIe). Per trial: the host's us per launch, and the GPU's time
from the first kernel to the last (events). Then the same with the GPU held (a 60 ms
sleep first). Ten interleaved rounds, medians.

Part 2, torchvision ResNet-50 (batch 128, channels_last, bf16 autocast, Inductor): the
host's time to issue the forward, and the forward's GPU time, with a 2 GiB D2H copy
issued on a side stream just before the forward, or nothing. Ten interleaved rounds.

    PYTHONPATH=$PWD python benchmarks/results/2026-11-28_s36_dma_probe.py
"""
import statistics
import time

import torch

dev = torch.device("cuda")
compute = torch.cuda.current_stream(dev)
side = torch.cuda.Stream(dev)
small = torch.zeros(256, device=dev)
GIB = 1 << 30
src = torch.empty(2 * GIB, dtype=torch.uint8, device=dev)
dst = torch.empty(2 * GIB, dtype=torch.uint8, device=dev)
pinned = torch.empty(2 * GIB, dtype=torch.uint8, pin_memory=True)
cycles_per_ms = None


def cycles_ms():
    global cycles_per_ms
    if cycles_per_ms is None:
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for _ in range(2):
            a.record(); torch.cuda._sleep(1 << 22); b.record(); b.synchronize()
        cycles_per_ms = (1 << 22) / a.elapsed_time(b)
    return cycles_per_ms


def side_work(mode, nbytes):
    with torch.cuda.stream(side):
        if mode == "d2h":
            pinned[:nbytes].copy_(src[:nbytes], non_blocking=True)
        elif mode == "h2d":
            src[:nbytes].copy_(pinned[:nbytes], non_blocking=True)
        elif mode == "d2d":
            dst[:nbytes].copy_(src[:nbytes], non_blocking=True)


def launches(mode, held, n=2000):
    torch.cuda.synchronize()
    if held:
        torch.cuda._sleep(int(60 * cycles_ms()))
    side_work(mode, GIB)
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    a.record()
    for _ in range(n):
        small.add_(1)
    b.record()
    host = (time.perf_counter() - t0) * 1e6 / n
    torch.cuda.synchronize()
    return host, a.elapsed_time(b) * 1e3 / n


MODES = ("none", "d2h", "h2d", "d2d")
print("part 1: 2000 small kernels; us per kernel, host (issue) / GPU (first to last), median (min-max) of 10")
for held in (False, True):
    for m in MODES:
        launches(m, held)
    got = {m: [] for m in MODES}
    for r in range(10):
        for m in MODES[r % 4:] + MODES[:r % 4]:
            got[m].append(launches(m, held))
    for m in MODES:
        h = [x for x, _ in got[m]]
        g = [y for _, y in got[m]]
        print(f"  {'held' if held else 'free':4} {m:4}  host {statistics.median(h):6.2f} ({min(h):.2f}-{max(h):.2f})"
              f"  gpu {statistics.median(g):6.2f} ({min(g):.2f}-{max(g):.2f})")

print("part 2: ResNet-50 forward, Inductor; ms")
try:
    import torchvision
except ImportError:
    raise SystemExit("torchvision missing: part 2 skipped")
model = torchvision.models.resnet50().to(dev).to(memory_format=torch.channels_last)
x = torch.randn(128, 3, 224, 224, device=dev).contiguous(memory_format=torch.channels_last)
y = torch.randint(0, 1000, (128,), device=dev)


def loss_fn(m, x, y):
    with torch.autocast("cuda", torch.bfloat16):
        return torch.nn.functional.cross_entropy(m(x), y)


step_fn = torch.compile(loss_fn)
for _ in range(4):
    step_fn(model, x, y).backward()
torch.cuda.synchronize()


def fw(mode):
    torch.cuda.synchronize()
    side_work(mode, 2 * GIB)
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    a.record()
    loss = step_fn(model, x, y)
    b.record()
    host = (time.perf_counter() - t0) * 1e3
    t1 = time.perf_counter()
    loss.backward()
    host_bw = (time.perf_counter() - t1) * 1e3
    torch.cuda.synchronize()
    model.zero_grad(set_to_none=True)
    return host, a.elapsed_time(b), host_bw


got = {m: [] for m in MODES}
for r in range(10):
    for m in MODES[r % 4:] + MODES[:r % 4]:
        got[m].append(fw(m))
for m in MODES:
    h = [v[0] for v in got[m]]
    g = [v[1] for v in got[m]]
    hb = [v[2] for v in got[m]]
    print(f"  {m:4}  forward host {statistics.median(h):6.2f} ({min(h):.2f}-{max(h):.2f})  forward gpu "
          f"{statistics.median(g):6.2f} ({min(g):.2f}-{max(g):.2f})  backward host {statistics.median(hb):6.2f}")
