"""Step time and memory of the example GPT under offload policies, on a GPU.

    TORCHINDUCTOR_FORCE_DISABLE_CACHES=1 python benchmarks/bench_policy.py --preset h100

For each policy: compile, warm up (excluded), then time ``--steps`` training steps with
CUDA synchronisation around each and report the median; peak allocated memory, the
activation peak (peak minus memory held before forward), the memory forward leaves
allocated for backward (``after_fwd_gib``), bytes offloaded per step, and the copy
rate the step time implies if every copy were serial (``2 * offloaded / step``).
Prints a table last; ``--out`` writes JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from tabulate import tabulate

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import offload_compiler  # noqa: E402
from offload_compiler.models.gpt import GPT, PRESETS, make_batch, preset  # noqa: E402


def run(policy: str, args: argparse.Namespace) -> dict:
    torch._dynamo.reset()
    torch.cuda.empty_cache()
    torch.manual_seed(0)
    cfg = preset(args.preset)
    model = GPT(cfg).cuda().to(torch.bfloat16)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    backend = offload_compiler.make_backend(policy=policy, inner_compiler=args.inner_compiler)
    compiled = torch.compile(model, backend=backend)
    idx, tgt = make_batch(cfg, "cuda")

    def step() -> float:
        loss = compiled(idx, tgt)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    t0 = time.perf_counter()
    first_loss = step().item()
    compile_s = time.perf_counter() - t0
    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    times, act_peaks, peaks, resident = [], [], [], []
    for _ in range(args.steps):
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        loss = compiled(idx, tgt)
        resident.append(torch.cuda.memory_allocated() - before)  # held for backward
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
        peaks.append(torch.cuda.max_memory_allocated())
        act_peaks.append(torch.cuda.max_memory_allocated() - before)
    offloaded = sum(p.offloaded_bytes for p in backend.plans)
    step_ms = statistics.median(times)
    stats = offload_compiler.host_pool().stats()
    return {
        "policy": policy,
        "step_ms": step_ms,
        "step_ms_min": min(times),
        "peak_gib": max(peaks) / 2**30,
        "activation_gib": max(act_peaks) / 2**30,
        "after_fwd_gib": max(resident) / 2**30,
        "offloaded_gib": offloaded / 2**30,
        "copy_gbps_if_serial": (2 * offloaded / 1e9) / (step_ms / 1e3) if offloaded else 0.0,
        "pinned_gib": stats.reserved_bytes / 2**30,
        "pinned_allocations": stats.allocations,
        "compile_s": compile_s,
        "first_loss": first_loss,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="h100", choices=sorted(PRESETS))
    p.add_argument("--policies", default="none,all")
    p.add_argument("--inner-compiler", default="inductor", choices=["inductor", "eager"])
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("this benchmark needs a CUDA device")
    rows = [run(policy, args) for policy in args.policies.split(",")]
    meta = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "preset": args.preset,
        "config": preset(args.preset).__dict__,
        "command": " ".join(sys.argv),
    }
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    print(json.dumps(meta))
    print(tabulate(rows, headers="keys", floatfmt=".2f"))


if __name__ == "__main__":
    main()
