"""Session 28 (issue 18): what holds HF Llama's measured step peak at low budgets, against
what the planner predicted there. Throwaway probe, kept with the results it made.

    PYTHONPATH=$PWD python benchmarks/results/2026-11-25_s28_peak_probe.py FACTORY OPTIONS_JSON [STEPS]

Compiles ``benchmarks/zoo_models.FACTORY`` (``llama``, ``gpt``: cast to bf16; on CUDA where there is one) whole with the offload backend and
``OPTIONS_JSON``, runs STEPS training steps (SGD), and prints, per plan: predicted and
measured step peak and time, the op at the predicted step peak, and the 30 largest
allocations live at the measured peak (the backend's own record, ``runtime/history``).
"""
import json
import sys
import time

sys.path.insert(0, "benchmarks")
import torch  # noqa: E402

import offload_compiler  # noqa: E402
from offload_compiler.runtime import history  # noqa: E402
import zoo_models  # noqa: E402

history.HOLDERS = 30
G = 2**30
name, options = sys.argv[1], json.loads(sys.argv[2])
steps = int(sys.argv[3]) if len(sys.argv) > 3 else 6
dev = "cuda" if torch.cuda.is_available() else "cpu"
model, batch = getattr(zoo_models, name)()
model = model.to(dev, torch.bfloat16 if name in ("llama", "gpt") else None)
batch = [b.to(dev) for b in batch]
sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
backend = offload_compiler.make_backend(options)
step_fn = torch.compile(model, backend=backend)
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
try:
    for i in range(steps):
        if dev == "cuda":
            torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated() if dev == "cuda" else 0
        t = time.perf_counter()
        loss = step_fn(*batch)
        loss.backward()
        sync()
        peak = torch.cuda.max_memory_allocated() - before if dev == "cuda" else 0
        print(f"step {i}: {1e3 * (time.perf_counter() - t):.1f} ms, peak above before-forward {peak / G:.3f} GiB",
              flush=True)
        opt.step()
        opt.zero_grad(set_to_none=True)
except Exception as e:  # a memory limit no plan fits: still print the plans
    print(f"stopped: {type(e).__name__}: {e}")
for plan in backend.plans:
    p, m, sim = plan.predicted, plan.measured, plan.simulation
    print(f"== graph {plan.graph_id} (replaces {plan.replaces}, reverted {plan.reverted}) "
          f"corrections {plan.corrections}")
    if p is None:
        continue
    print(f"predicted: step {p.step_ms:.2f} ms, step peak {p.step_peak_bytes / G:.3f} GiB, act peak "
          f"{p.activation_peak_bytes / G:.3f} GiB, budget {p.budget_bytes / G:.3f} GiB")
    if sim is not None and sim.origins is not None:
        t_peak = sim.step_peak_time_ms
        ops = [e for e in sim.events if e[0] == "compute" and e[3] <= t_peak <= e[4]]
        for e in ops[:3]:
            print(f"  predicted step peak at {t_peak:.2f} ms (forward ends {sim.fw_ms:.2f}): op {e[1]} "
                  f"({'backward' if sim.origins.in_backward(e[1]) else 'forward'}) {sim.origins.op(e[1])} {e[2]}")
    print("  at the predicted step peak:")
    for h in plan.predicted_holders(30):
        print("   ", h)
    if m is not None:
        print(f"measured: {plan.measured_text()}")
        print(f"  step peak {(m.step_peak_bytes or 0) / G:.3f} GiB in {m.peak_phase}; holders:")
        for h in m.holders:
            print("   ", h)
