"""Session 30 (issue 18): every step of HF Llama at "auto" around a re-plan that is given
up, forced by injected measurements (the first plan measured as predicted, its re-plan
1.5x slower at the same peak), so that the first plan's compiled graph runs before the
re-plan and again after it in one process. Command 1's zoo row measured 152 ms after such
a return against 130.6 ms measured for the same plan before it. Throwaway probe.

    PYTHONPATH=$PWD python benchmarks/results/2026-11-27_s30_revert_probe.py STEPS
"""
import dataclasses
import sys
import time

sys.path.insert(0, "benchmarks")
sys.path.insert(0, "tests")
import torch  # noqa: E402

import offload_compiler  # noqa: E402
from offload_compiler.runtime import host_pool, measure  # noqa: E402
from helpers import FakeSource, as_predicted  # noqa: E402
import zoo_models  # noqa: E402

steps = int(sys.argv[1])
model, batch = zoo_models.llama()
model = model.to("cuda", torch.bfloat16)
batch = [b.to("cuda") for b in batch]
backend = offload_compiler.make_backend({"memory_budget": "auto"})


def make(call):
    if len(backend.plans) == 1:
        return as_predicted(backend.plans)(call)
    first = backend.plans[0].measured
    return dataclasses.replace(first, call=call, fw_ms=first.fw_ms * 1.5, bw_ms=first.bw_ms * 1.5)


measure.set_source(FakeSource(make))
fn = torch.compile(model, backend=backend)
pool = host_pool()
for i in range(steps):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn(*batch)
    out.backward()
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t0) * 1e3
    model.zero_grad(set_to_none=True)
    s = pool.stats()
    print(f"step {i:2d}: {wall:7.1f} ms  graph {[g.plan.graph_id for g in backend._measured if g.plan]}  "
          f"pool changes {pool.changes} in use {s.in_use_bytes >> 20} MiB idle {s.idle_bytes >> 20} MiB  "
          f"allocator reserved {torch.cuda.memory_reserved() >> 20} MiB", flush=True)
for plan in backend.plans:
    print(plan.summary()[:300])
