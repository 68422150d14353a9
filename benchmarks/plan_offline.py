"""What the planner decides for the example GPT at a GPU size, planned on a CPU.

    python benchmarks/plan_offline.py --preset h100 --budgets auto,0.5,0.35,0.2 \
        --hardware '{"d2h_gbps": 55.4, "h2d_gbps": 55.5}'

Builds the model on the meta device in bf16 (no weight is allocated) and plans it as
:func:`offload_compiler.plan_offline` does for ``cuda`` on a machine without CUDA: on fake
CPU tensors in loopback mode (``devices=("cpu",)``; nothing runs) with a hardware profile
given in full, the measured H100 profile (``offload_compiler.offline.PROFILES["h100"]``)
unless ``--hardware`` overrides fields. The script prints, per budget, the planner's
predictions, where its bytes went, and the seconds from the start of the compile to the
plan (Dynamo tracing, AOTAutograd and planning; the plan cache is off unless
``OFFLOAD_COMPILER_PLAN_CACHE`` says otherwise). With ``-v``, planning logs each phase
with its time. ``python -m offload_compiler explain`` does the same for any model
factory, one budget at a time.

On a CPU the graph differs from the GPU's in one op: attention is the CPU flash kernel,
costed with the CUDA kernel's FLOP formula. Use it to see the planner's choices and
predicted trade-off without a GPU; measure on a GPU before quoting a step time.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

import torch
from tabulate import tabulate

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from offload_compiler.config import budget_from_text  # noqa: E402
from offload_compiler.models.gpt import GPT, PRESETS, make_batch, preset  # noqa: E402
from offload_compiler.config import OffloadConfig  # noqa: E402
from offload_compiler.offline import PROFILES, trace_and_plan  # noqa: E402
from offload_compiler.reporting import tables  # noqa: E402

#: The measured H100 profile (kept under this name for scripts that import it).
H100_PROFILE = PROFILES["h100"]


def plan_once(model, inputs, options: dict):
    """The plan of ``model(*inputs)``'s one graph, made on fake tensors without running it
    (``offload_compiler.offline.trace_and_plan``, as ``plan_offline`` and ``explain`` do).
    ``options`` in loopback, e.g. ``{"devices": ("cpu",), "hardware": H100_PROFILE}``."""
    torch._dynamo.reset()
    plans = trace_and_plan(model, inputs, {}, OffloadConfig.from_options(options), device=torch.device("cpu"))
    if len(plans) != 1:
        raise RuntimeError(f"expected one planned graph, got {len(plans)}")
    return plans[0]


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
    if args.verbose:
        import logging

        logging.basicConfig(level=logging.INFO, format="%(message)s")
    hardware = {**PROFILES["h100"], **json.loads(args.hardware)}
    extra = json.loads(args.options)
    cfg = preset(args.preset)
    with torch.device("meta"):
        model = GPT(cfg).to(torch.bfloat16)
    inputs = make_batch(cfg, device="cpu")
    rows = []
    for text in args.budgets.split(","):
        # plan_cache off: time the planner, not a replay of a plan cached by an earlier run
        # (an option, not the environment: this function also runs inside test processes).
        options = {"devices": ("cpu",), "hardware": hardware, "memory_budget": _budget(text),
                   "policy": "cost_model", "plan_cache": False, **extra}
        t0 = time.perf_counter()
        plan = plan_once(model, inputs, options)
        compile_s = time.perf_counter() - t0
        kinds = Counter()
        for d in plan.activations:
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
            print(tables.decision_table(plan))
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
