"""Session 30 (issue 18): every step's time, host time and garbage collections, with the
plan in force, for one zoo model and one strategy. Throwaway probe, kept with the results
it made.

    PYTHONPATH=$PWD python benchmarks/results/2026-11-27_s30_step_probe.py MODEL OPTIONS_JSON|inductor STEPS

MODEL is ``llama`` (bf16 weights) or ``vit`` (fp32 weights, bf16 autocast inside), from
``benchmarks/zoo_models``. Each step is run as the zoo's harness runs it (forward, a
scalar loss, backward, gradients set to None; no optimizer) between two
synchronisations, and printed: its wall time, the host's time to return from the
forward and from ``backward()``, the collector's runs in it (generation and ms), the host
pool's allocations and releases so far, whether the allocator records its history, and
the graph (plan) that ran.
"""
import gc
import json
import sys
import time

sys.path.insert(0, "benchmarks")
import torch  # noqa: E402

import offload_compiler  # noqa: E402
from offload_compiler.runtime import host_pool  # noqa: E402
import zoo_models  # noqa: E402

name, how, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
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


gc.callbacks.append(on_gc)
pool = host_pool()
for i in range(steps):
    torch.cuda.synchronize()
    del collections[:]
    t0 = time.perf_counter()
    out = fn(*batch)  # the vit factory's module runs its own bf16 autocast
    t1 = time.perf_counter()
    loss = out if out.dim() == 0 else out.float().mean()
    loss.backward()
    t2 = time.perf_counter()
    torch.cuda.synchronize()
    t3 = time.perf_counter()
    model.zero_grad(set_to_none=True)
    graphs = [g.plan.graph_id for g in backend._measured if g.plan] if backend else []
    gcs = " ".join(f"g{g}:{ms:.1f}" for g, ms in collections)
    print(f"step {i:2d}: {1e3 * (t3 - t0):7.1f} ms  host fw {1e3 * (t1 - t0):6.1f}  bw {1e3 * (t2 - t1):6.1f}  "
          f"gc [{gcs}]  pool changes {pool.changes}  history {torch._C._cuda_isHistoryEnabled()}  "
          f"graph {graphs}", flush=True)
gc.callbacks.remove(on_gc)
for plan in backend.plans if backend else []:
    print(plan.summary()[:400])
