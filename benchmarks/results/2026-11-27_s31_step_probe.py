"""Session 31 (issue 18): every step's host and GPU time with the plan in force, and
when the backend measures, for one zoo model and one strategy; the measurement's start
can be put later (``WARMUP``: backward passes before a plan is measured, 1 in the
backend). Does a plan measured ten steps after its compile show the slower host that
the first plan's timed calls show two steps after it? Throwaway probe, kept with the
results it made.

    PYTHONPATH=$PWD python benchmarks/results/2026-11-27_s31_step_probe.py MODEL OPTIONS_JSON|inductor STEPS [WARMUP]

``PIN=N`` in the environment keeps the process on CPU core ``N`` (``os.sched_setaffinity``)
from the second step on (after the first compile has started Inductor's workers):
for the next session's check of whether the host's two speeds (session 31) come from
the main thread moving between cores. Not used in session 31's commands.

MODEL is a factory of ``benchmarks/zoo_models`` (``llama`` runs in bf16 weights).
Each step runs as the zoo's harness runs it (forward, a scalar loss, backward,
gradients set to None) between two synchronisations and prints: its wall time, the
host's time to return from the forward and from ``backward()``, the collector's runs,
the caching allocator's device allocations and frees in the step (``cudaMalloc`` and
``cudaFree``: slow host calls), the graph that ran and what was being measured. The
backend's own INFO log (each measurement, with its host times) goes to stdout too.
"""
import gc
import json
import logging
import os
import sys
import time

sys.path.insert(0, "benchmarks")
import torch  # noqa: E402

import offload_compiler  # noqa: E402
from offload_compiler import replanning  # noqa: E402
import zoo_models  # noqa: E402

name, how, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
if len(sys.argv) > 4:
    replanning.WARMUP_BACKWARDS = int(sys.argv[4])
logging.basicConfig(stream=sys.stdout, level=logging.WARNING, format="%(message)s")
logging.getLogger("offload_compiler").setLevel(logging.INFO)
model, batch = getattr(zoo_models, name)()
model = model.to("cuda", torch.bfloat16 if name == "llama" else None)
batch = [b.to("cuda") for b in batch]
if how == "inductor":
    backend, fn = None, torch.compile(model)
else:
    backend = offload_compiler.make_backend(json.loads(how))
    fn = torch.compile(model, backend=backend)
collections, began = [], [0.0]


def on_gc(phase, info):
    if phase == "start":
        began[0] = time.perf_counter()
    else:
        collections.append((info["generation"], (time.perf_counter() - began[0]) * 1e3))


def device_calls():
    s = torch.cuda.memory_stats()
    return s.get("num_device_alloc", 0), s.get("num_device_free", 0)


gc.callbacks.append(on_gc)
for i in range(steps):
    if i == 1 and os.environ.get("PIN"):
        os.sched_setaffinity(0, {int(os.environ["PIN"])})
    torch.cuda.synchronize()
    del collections[:]
    measuring = sorted({w for g in backend._measured for w in g.recorders}) if backend else []
    a0, f0 = device_calls()
    t0 = time.perf_counter()
    out = fn(*batch)
    t1 = time.perf_counter()
    loss = out if out.dim() == 0 else out.float().mean()
    loss.backward()
    t2 = time.perf_counter()
    torch.cuda.synchronize()
    t3 = time.perf_counter()
    model.zero_grad(set_to_none=True)
    a1, f1 = device_calls()
    measuring += [f"{w}*" for w in sorted({w for g in backend._measured for w in g.recorders})] if backend else []
    graphs = [g.plan.graph_id for g in backend._measured if g.plan] if backend else []
    gcs = " ".join(f"g{g}:{ms:.1f}" for g, ms in collections)
    print(f"step {i:2d}: {1e3 * (t3 - t0):8.1f} ms  host fw {1e3 * (t1 - t0):6.1f}  bw {1e3 * (t2 - t1):6.1f}  "
          f"mallocs {a1 - a0} frees {f1 - f0}  graph {graphs} measuring {measuring}  gc [{gcs[:80]}]",
          flush=True)
gc.callbacks.remove(on_gc)
