"""Session 33 (issue 18): does a plan with transfer ops launch more kernels than the one
without? The host lane prices the host per op that takes GPU time (``Predictions.kernels``,
aten ops of the joint graph), and the per-op time fitted on ResNet-50's and ViT-B/16's
first plans (with transfer ops) was 1.5x to 2x that measured on their re-plans (none).
For MODEL under Inductor and under the backend at a fixed budget (no re-plan), one step
under the profiler: kernel launches in the forward and the backward (``cu*LaunchKernel``
/ ``cudaLaunchKernel`` between markers), the transfer ops called, then the host's time
to issue each phase over 10 unprofiled steps (median). Throwaway probe, kept with its
results.

    PYTHONPATH=$PWD python benchmarks/results/2026-11-27_s33_kernel_probe.py MODEL BUDGET

``TABLE=1`` also prints the profiled step's ops by host self time.
"""
import os
import statistics
import sys
import time

sys.path.insert(0, "benchmarks")
import torch  # noqa: E402

import offload_compiler  # noqa: E402
import zoo  # noqa: E402
import zoo_models  # noqa: E402

name, budget = sys.argv[1], float(sys.argv[2])
model, batch = getattr(zoo_models, name)()
model = model.to("cuda", getattr(torch, zoo.MODELS[name].dtype))
batch = [b.to("cuda") for b in batch]


def loss_of(out):
    return out if out.dim() == 0 else out.float().mean()


def probe(label, fn, plans=None):
    for _ in range(3):
        loss_of(fn(*batch)).backward()
        model.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    from torch.profiler import ProfilerActivity, profile, record_function

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with record_function("PROBE_FW"):
            out = fn(*batch)
        with record_function("PROBE_BW"):
            loss_of(out).backward()
        torch.cuda.synchronize()
    model.zero_grad(set_to_none=True)
    if os.environ.get("TABLE"):  # where the profiled step's host time went, by op
        print(label, prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=22), flush=True)
    events = prof.events()
    spans = {e.name: (e.time_range.start, e.time_range.end) for e in events if e.name.startswith("PROBE_")}
    counts = {}
    for phase in ("PROBE_FW", "PROBE_BW"):
        a, b = spans[phase]
        inside = [e for e in events if a <= e.time_range.start <= b]
        counts[phase] = (sum("LaunchKernel" in e.name for e in inside),
                         sum(e.name.startswith("offload::") for e in inside),
                         sum("Memcpy" in e.name for e in inside))
    host = ([], [])
    for _ in range(10):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = fn(*batch)
        t1 = time.perf_counter()
        loss_of(out).backward()
        t2 = time.perf_counter()
        torch.cuda.synchronize()
        model.zero_grad(set_to_none=True)
        host[0].append(1e3 * (t1 - t0))
        host[1].append(1e3 * (t2 - t1))
    fw, bw = (statistics.median(h) for h in host)
    pred = plans[-1].predicted.kernels if plans and plans[-1].predicted is not None else None
    moved = len(plans[-1].offloaded) if plans else 0
    print(f"{label:10s} launches fw {counts['PROBE_FW'][0]:5d} bw {counts['PROBE_BW'][0]:5d}  "
          f"offload ops fw {counts['PROBE_FW'][1]:4d} bw {counts['PROBE_BW'][1]:4d}  memcpy {counts['PROBE_FW'][2]}/{counts['PROBE_BW'][2]}  "
          f"host fw {fw:6.2f} bw {bw:6.2f} ms (median of 10; fw {min(host[0]):.2f}-{max(host[0]):.2f})  "
          f"predicted ops {pred} offloaded {moved}", flush=True)


probe("inductor", torch.compile(model))
torch._dynamo.reset()
none = offload_compiler.make_backend(policy="none", replan=False)
probe("none", torch.compile(model, backend=none), none.plans)
torch._dynamo.reset()
b = offload_compiler.make_backend(memory_budget=budget, replan=False)
probe(f"budget{budget}", torch.compile(model, backend=b), b.plans)
