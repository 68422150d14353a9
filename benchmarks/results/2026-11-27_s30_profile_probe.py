"""Session 30 (issue 18): a profile of settled steps (torch.profiler, CPU and CUDA), for
one zoo model and one strategy: where a step's wall time goes beyond the GPU time the
backend measures. Throwaway probe, kept with the results it made.

    PYTHONPATH=$PWD python benchmarks/results/2026-11-27_s30_profile_probe.py MODEL OPTIONS_JSON|inductor SETTLE TRACE

Runs SETTLE steps as the zoo's harness does (forward, backward, gradients set to None),
then profiles two more, each between two synchronisations, writes the Chrome trace to
TRACE and prints the ops with the most host time and each step's wall time.
"""
import json
import sys
import time

sys.path.insert(0, "benchmarks")
import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

import offload_compiler  # noqa: E402
import zoo_models  # noqa: E402

name, how, settle, trace = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
model, batch = getattr(zoo_models, name)()
model = model.to("cuda", torch.bfloat16 if name == "llama" else None)
batch = [b.to("cuda") for b in batch]
backend = None if how == "inductor" else offload_compiler.make_backend(json.loads(how))
fn = torch.compile(model) if backend is None else torch.compile(model, backend=backend)


def step():
    out = fn(*batch)
    loss = out if out.dim() == 0 else out.float().mean()
    loss.backward()
    model.zero_grad(set_to_none=True)


for _ in range(settle):
    step()
torch.cuda.synchronize()
walls = []
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    for _ in range(2):
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        walls.append((time.perf_counter() - t0) * 1e3)
prof.export_chrome_trace(trace)
print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=22, max_name_column_width=60))
print("walls ms", [round(w, 1) for w in walls], "settled", backend.settled if backend else None,
      "graphs", [g.plan.graph_id for g in backend._measured if g.plan] if backend else None)
