"""Session 32 (issue 18): why the GPU host issues the same compiled forward at two
speeds (session 31). Each step as the zoo's harness runs it, between two
synchronisations, printing for the forward's issue and for ``backward()``: the wall
time, the main thread's CPU time (``time.thread_time``), its involuntary context
switches, the core it ran on before and after, and the cgroup's CPU throttling in the
step (``cpu.stat``), and the GPU's time from the forward's start to its end and to the
backward's end (events on the compute stream). Wall well over CPU time means the thread waited (preempted or
blocked in a CUDA call); CPU time as slow as the wall means the core itself ran slower
or did more. Throwaway probe, kept with the results it made.

    PYTHONPATH=$PWD python benchmarks/results/2026-11-27_s32_host_probe.py MODEL OPTIONS_JSON|inductor STEPS

``PIN=N`` keeps the process on core ``N`` from the second step on (after the first
compile started Inductor's workers). MODEL is a factory of ``benchmarks/zoo_models``,
in the zoo's dtype for it.
"""
import json
import logging
import os
import resource
import sys
import time

sys.path.insert(0, "benchmarks")
import torch  # noqa: E402

import offload_compiler  # noqa: E402
from offload_compiler.runtime import host_pool  # noqa: E402
import zoo  # noqa: E402
import zoo_models  # noqa: E402

name, how, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
logging.basicConfig(stream=sys.stdout, level=logging.WARNING, format="%(message)s")
logging.getLogger("offload_compiler").setLevel(logging.INFO)
model, batch = getattr(zoo_models, name)()
model = model.to("cuda", getattr(torch, zoo.MODELS[name].dtype))  # as the zoo runs it (session 32's
# command 9 cast only the Llama, and ran the GPT in float32)
batch = [b.to("cuda") for b in batch]
fn = torch.compile(model) if how == "inductor" else torch.compile(
    model, backend=offload_compiler.make_backend(json.loads(how)))


def core() -> int:
    with open("/proc/thread-self/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[36])  # field 39: the last core it ran on


def throttled() -> tuple[int, int]:
    try:
        with open("/sys/fs/cgroup/cpu.stat") as f:
            s = dict(line.split() for line in f)
        return int(s.get("nr_throttled", 0)), int(s.get("throttled_usec", 0))
    except OSError:
        return 0, 0


def mark():
    return (time.perf_counter(), time.thread_time(), resource.getrusage(resource.RUSAGE_THREAD).ru_nivcsw,
            core(), throttled())


def span(a, b) -> str:
    return (f"{1e3 * (b[0] - a[0]):6.1f}/{1e3 * (b[1] - a[1]):6.1f} ms iv {b[2] - a[2]:2d} "
            f"core {a[3]:2d}>{b[3]:2d} thr {b[4][0] - a[4][0]} {(b[4][1] - a[4][1]) / 1e3:.1f}ms")


print("cores allowed:", sorted(os.sched_getaffinity(0)), "cpu.max:",
      open("/sys/fs/cgroup/cpu.max").read().strip() if os.path.exists("/sys/fs/cgroup/cpu.max") else "-",
      flush=True)
for i in range(steps):
    if i == 1 and os.environ.get("PIN"):
        os.sched_setaffinity(0, {int(os.environ["PIN"])})
    torch.cuda.synchronize()
    e = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
    pool = host_pool()
    p0 = (pool.allocations, pool.stats().released_blocks)
    m0 = mark()
    e[0].record()
    out = fn(*batch)
    e[1].record()
    m1 = mark()
    loss = out if out.dim() == 0 else out.float().mean()
    loss.backward()
    e[2].record()
    m2 = mark()
    torch.cuda.synchronize()
    m3 = mark()
    model.zero_grad(set_to_none=True)
    pinned = f"pool +{pool.allocations - p0[0]} -{pool.stats().released_blocks - p0[1]}"
    print(f"step {i:2d}: {1e3 * (m3[0] - m0[0]):7.1f} ms  gpu fw {e[0].elapsed_time(e[1]):6.2f} "
          f"bw {e[1].elapsed_time(e[2]):6.2f}  {pinned}  fw wall/cpu {span(m0, m1)}  bw wall/cpu {span(m1, m2)}",
          flush=True)
