"""Session 38 (issue 18): is the slower host pace measured on "auto"'s first plan of
ResNet-50 (16.4 us per forward kernel, against 9.0 in its re-plan a minute later, session
38 command 1) the plan's own, or the host's level at the time?

Three compiled versions of ResNet-50 (batch 128, bf16 autocast, channels_last) in one
process: plain Inductor, the backend with nothing moved (``policy="none"``), and the
backend at ``memory_budget=0.75`` without re-planning (about 20 values offloaded: the
kind of plan "auto" starts from; compiled without Inductor's buffer pool). Twelve
rounds, each variant in turn (rotated), ten steps each: synchronised before the forward,
so the host's time to issue the forward and the backward is its own (the GPU never
holds it back). Per round and variant, the median host time of each phase.

    PYTHONPATH=$PWD python benchmarks/results/2026-11-28_s38_host_level_probe.py
"""
import logging
import statistics
import sys
import time

import torch

sys.path.insert(0, "benchmarks")
import offload_compiler  # noqa: E402
from zoo_models import resnet50  # noqa: E402

logging.basicConfig(level=logging.WARNING, format="%(message)s")
model, (x, y) = resnet50()
model, x, y = model.cuda(), x.cuda(), y.cuda()
variants = {"inductor": None, "none": {"policy": "none"},
            "offload0.75": {"memory_budget": 0.75, "replan": False}}
compiled = {}
for name, options in variants.items():
    t0 = time.perf_counter()
    fn = torch.compile(model) if options is None else torch.compile(
        model, backend=offload_compiler.make_backend(**options))
    for _ in range(3):
        fn(x, y).backward()
        model.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    compiled[name] = fn
    print(f"{name}: compiled and warm in {time.perf_counter() - t0:.1f} s", flush=True)

names = list(compiled)
rows = {n: [] for n in names}
start = time.perf_counter()
for r in range(12):
    order = names[r % 3:] + names[:r % 3]
    for n in order:
        fw, bw, gpu = [], [], []
        for _ in range(10):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            loss = compiled[n](x, y)
            t1 = time.perf_counter()
            loss.backward()
            t2 = time.perf_counter()
            torch.cuda.synchronize()
            t3 = time.perf_counter()
            model.zero_grad(set_to_none=True)
            fw.append((t1 - t0) * 1e3)
            bw.append((t2 - t1) * 1e3)
            gpu.append((t3 - t0) * 1e3)
        rows[n].append((statistics.median(fw), statistics.median(bw), statistics.median(gpu)))
    print(f"round {r + 1} at {time.perf_counter() - start:.0f} s: " + "; ".join(
        f"{n} host fw {rows[n][-1][0]:.2f} bw {rows[n][-1][1]:.2f} step {rows[n][-1][2]:.2f}" for n in names),
        flush=True)

print("\nvariant      host fw ms (median, min-max over rounds)   host bw ms             synced step ms")
for n in names:
    cols = list(zip(*rows[n]))
    print(f"{n:12s} " + "   ".join(f"{statistics.median(c):6.2f} ({min(c):.2f}-{max(c):.2f})" for c in cols))
