"""What the planner decides for the example GPT at a GPU size, planned on a CPU.

    python benchmarks/plan_offline.py --preset h100 --budgets auto,0.5,0.35,0.2 \
        --hardware '{"d2h_gbps": 55.4, "h2d_gbps": 55.5}'

Builds the model on the CPU in bf16 and compiles it with the offload backend in
loopback mode (``devices=("cpu",)``) with a hardware profile given in full: the
measured H100 profile of ``benchmarks/RESULTS.md`` unless ``--hardware`` overrides
fields. Compilation stops once the planner has decided (nothing runs: the model is
never executed at this size on a CPU), and the script prints, per budget, the
planner's predictions, where its bytes went, and the seconds from the start of the
compile to the plan (Dynamo tracing, AOTAutograd and planning; the plan cache is off
unless ``OFFLOAD_COMPILER_PLAN_CACHE`` says otherwise). With ``-v``, planning logs each
phase with its time.

The graph differs from the GPU's in one op: attention is the CPU flash kernel, costed
with the CUDA kernel's FLOP formula. Use it to see the planner's choices and
predicted trade-off without a GPU; measure on a GPU before quoting a step time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

import torch
from tabulate import tabulate

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import offload_compiler  # noqa: E402
from offload_compiler.config import budget_from_text  # noqa: E402
from offload_compiler.models.gpt import GPT, PRESETS, make_batch, preset  # noqa: E402

#: Measured on an NVIDIA H100 80GB HBM3 (results/2026-11-21_s4_kernel_rates_h100.json:
#: copies, matmuls and memory as calibrated; attention forward from its causal SDPA
#: row, backward from the profile of the example GPT in the same session; copy_slowdown
#: from its eager 256 MiB add beside both copies).
H100_PROFILE = {"d2h_gbps": 55.1, "h2d_gbps": 55.3, "duplex_gbps": 100.7, "matmul_tflops": 721.0,
                "matmul_fp32_tflops": 51.5, "memory_gbps": 2969.0, "attention_tflops": 570.0,
                "attention_backward_tflops": 454.0, "launch_us": 4.0, "copy_slowdown": 0.037}


class _Planned(Exception):
    """Raised once the planner has decided, to stop compilation there."""


class _StopAfterPlan(list):
    def append(self, plan) -> None:
        super().append(plan)
        raise _Planned()


def plan_once(model, inputs, options: dict):
    backend = offload_compiler.make_backend(**options)
    backend.plans = _StopAfterPlan()
    torch._dynamo.reset()
    try:
        torch.compile(model, backend=backend)(*inputs)
    except Exception as e:  # Dynamo wraps the stop in its own error
        if not backend.plans:
            raise RuntimeError(f"compilation failed before the planner decided: {e}") from e
    return backend.plans[0]


def _budget(text: str):
    return budget_from_text(text)  # "auto", a fraction, or bytes with a unit ("12GiB")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="h100", choices=sorted(PRESETS))
    p.add_argument("--budgets", default="auto,0.5,0.35,0.2")
    p.add_argument("--hardware", default="{}", help="JSON: profile fields to override")
    p.add_argument("--options", default="{}", help="JSON: further OffloadConfig options")
    p.add_argument("--decisions", action="store_true", help="print every decision and reason")
    p.add_argument("--out", default=None, help="write the rows here as JSON")
    p.add_argument("-v", "--verbose", action="store_true", help="log each planning phase (INFO)")
    args = p.parse_args(argv)
    # Time the planner, not a replay of a plan cached by an earlier run.
    os.environ.setdefault("OFFLOAD_COMPILER_PLAN_CACHE", "0")
    if args.verbose:
        import logging

        logging.basicConfig(level=logging.INFO, format="%(message)s")
    hardware = {**H100_PROFILE, **json.loads(args.hardware)}
    extra = json.loads(args.options)
    cfg = preset(args.preset)
    torch.manual_seed(0)
    with torch.device("cpu"):
        model = GPT(cfg).to(torch.bfloat16)
    inputs = make_batch(cfg, device="cpu")
    rows = []
    for text in args.budgets.split(","):
        options = {"devices": ("cpu",), "hardware": hardware, "memory_budget": _budget(text),
                   "policy": "cost_model", **extra}
        t0 = time.perf_counter()
        plan = plan_once(model, inputs, options)
        compile_s = time.perf_counter() - t0
        kinds = Counter()
        for d in plan.decisions:
            kinds[d.decision.value] += d.nbytes
        pr = plan.predicted
        rows.append({
            "budget": text, "step_ms": pr["step_ms"], "baseline_step_ms": pr["baseline_step_ms"],
            "stall_ms": pr["stall_ms"], "activation_gib": pr["activation_peak_bytes"] / 2**30,
            "baseline_gib": pr["baseline_activation_peak_bytes"] / 2**30,
            "step_peak_gib": pr.get("step_peak_bytes", 0) / 2**30,
            "baseline_step_peak_gib": pr.get("baseline_step_peak_bytes", 0) / 2**30,
            **{f"{k}_gib": kinds[k] / 2**30 for k in ("keep", "offload", "recompute")},
            "recomputed": len(plan.recomputed), "note": plan.note,
            "trace_and_plan_s": compile_s,
        })
        if args.decisions:
            print(f"== budget {text} ==")
            for d in plan.decisions:
                print(f"  {d.decision.value:9s} {d.name:28s} {d.nbytes / 2**20:8.1f} MiB  {d.reason}")
    if args.out:
        Path(args.out).write_text(json.dumps({"preset": args.preset, "hardware": hardware,
                                              "options": extra, "rows": rows}, indent=1))
    print(tabulate([[r["budget"], f"{r['step_ms']:.1f}", f"{r['step_ms'] / r['baseline_step_ms']:.3f}",
                     f"{r['stall_ms']:.1f}", f"{r['activation_gib']:.2f}", f"{r['step_peak_gib']:.2f}",
                     f"{r['offload_gib']:.2f}",
                     f"{r['recompute_gib']:.2f}", r["recomputed"], f"{r['trace_and_plan_s']:.1f}",
                     r["note"][:40]] for r in rows],
                   headers=["budget", "pred step ms", "vs base", "stall ms", "act GiB", "step peak GiB", "offload GiB",
                            "recompute GiB", "recomputed", "trace+plan s", "note"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
