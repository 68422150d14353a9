"""Where planning time goes: per-phase seconds and counts, planned on a CPU.

    python benchmarks/plan_cost.py --models gpt,llama --budgets auto,0.5
    python benchmarks/plan_cost.py --models gpt --budgets auto --profile-out out/prof --top 30

For each model of ``--models`` and each budget of ``--budgets`` it compiles the model
with the offload backend in loopback mode (``devices=("cpu",)``), the measured H100
profile given in full (``benchmarks/plan_offline.py``), and stops compilation once the
planner has decided: nothing runs at the model's size. It prints per row the wall and
CPU seconds (``time.process_time``) from the start of the compile to the plan, the same
inside the planner and in its phases, and the counts that do not depend on how busy
the machine is: simulations of a plan (``simulator.simulate``), min-cut partitions
(``partitioner._partition``, the first one included) and facts gathered off a partition
(``facts.gather``). Phases are timed by wrapping those functions (and ``plan_graph``,
``solver.solve``) where they are called: a few thousand calls, no profiler in the way.
``--profile-out`` also runs each row under ``cProfile`` (slower; for the breakdown by
function). The plan cache is off unless ``OFFLOAD_COMPILER_PLAN_CACHE`` says otherwise.

Models (``benchmarks/zoo_models.py`` where the zoo has them, on the CPU):

- ``gpt``: the example GPT, ``h100`` preset, in bf16;
- ``llama``: Hugging Face ``LlamaForCausalLM`` (8 layers, width 2048, 16 heads, MLP 5632,
  vocabulary 32000, batch 4 of 4096 tokens) in bf16; needs ``transformers``;
- ``vit``: timm ViT-B/16, batch 96, bf16 autocast; needs ``timm`` (and ``torchvision``);
- ``resnet``: torchvision ResNet-50, batch 128, bf16 autocast; needs ``torchvision``;
- ``medium``, ``small``, ``tiny``: smaller presets of the example GPT.

A model whose package does not import is reported as not run, with the error. Counts
are what to compare across runs: the machine's other work moves wall time, and CPU time
less so.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import json
import pstats
import sys
import time
from pathlib import Path

import torch
from tabulate import tabulate

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from plan_offline import H100_PROFILE, plan_once  # noqa: E402

#: Phases: a name, the function that makes it (module, name) and the modules that call it
#: by that name (each is wrapped there).
PHASES = {
    "planning": ("offload_compiler.planning.search", "plan_graph", ["offload_compiler.partitioner"]),
    "min-cut": ("offload_compiler.partitioner", "_partition", ["offload_compiler.partitioner"]),
    "gather": ("offload_compiler.planning.facts", "gather",
               ["offload_compiler.planning.search", "offload_compiler.planning.facts"]),
    "solve": ("offload_compiler.planning.solver", "solve", ["offload_compiler.planning.search"]),
    "simulate": ("offload_compiler.planning.simulator", "simulate",
                 ["offload_compiler.planning.solver", "offload_compiler.planning.facts"]),
}
#: Counts reported under these names: calls of the phase's function.
COUNTS = {"simulations": "simulate", "min-cut partitions": "min-cut", "gathers": "gather"}


@contextlib.contextmanager
def metered():
    """Wrap every phase's function where it is called; yields ``{phase: [calls, wall s,
    cpu s]}``, filled as they run, and puts the functions back after."""
    import importlib

    seen = {phase: [0, 0.0, 0.0] for phase in PHASES}
    undo = []
    for phase, (module, name, callers) in PHASES.items():
        fn = getattr(importlib.import_module(module), name)

        def timed(*args, _fn=fn, _row=seen[phase], **kwargs):
            t0, c0 = time.perf_counter(), time.process_time()
            try:
                return _fn(*args, **kwargs)
            finally:
                _row[0] += 1
                _row[1] += time.perf_counter() - t0
                _row[2] += time.process_time() - c0

        for caller in callers:
            mod = importlib.import_module(caller)
            undo.append((mod, name, getattr(mod, name)))
            setattr(mod, name, timed)
    try:
        yield seen
    finally:
        for mod, name, fn in reversed(undo):
            setattr(mod, name, fn)


def _model(name: str):
    """``(model, inputs)`` on the CPU, in the dtype the zoo runs it in."""
    import zoo_models

    if name in ("gpt", "medium", "small", "tiny"):
        from offload_compiler.models.gpt import GPT, make_batch, preset

        cfg = preset("h100" if name == "gpt" else name)
        torch.manual_seed(0)
        return GPT(cfg).to(torch.bfloat16).train(), make_batch(cfg, device="cpu")
    factories = {"llama": (zoo_models.llama, torch.bfloat16), "vit": (zoo_models.vit, None),
                 "resnet": (zoo_models.resnet50, None)}
    if name not in factories:
        raise ValueError(f"unknown model {name!r}; valid models are "
                         f"{sorted([*factories, 'gpt', 'medium', 'small', 'tiny'])}")
    factory, dtype = factories[name]
    model, inputs = factory()
    if dtype is not None:
        model = model.to(dtype)
    return model, inputs


def measure(name: str, budget, profile_out: Path | None = None) -> dict:
    """Plan ``name`` at ``budget``: seconds and counts (``profile_out``: under cProfile,
    its stats written there)."""
    model, inputs = _model(name)
    options = {"devices": ("cpu",), "hardware": H100_PROFILE, "memory_budget": budget, "plan_cache": False,
               "policy": "cost_model"}
    profile = cProfile.Profile() if profile_out is not None else None
    with metered() as phases:
        t0, c0 = time.perf_counter(), time.process_time()
        if profile is not None:
            profile.enable()
        try:
            plan = plan_once(model, inputs, options)
        finally:
            if profile is not None:
                profile.disable()
        total_s, cpu_s = time.perf_counter() - t0, time.process_time() - c0
    if profile is not None:
        profile_out.parent.mkdir(parents=True, exist_ok=True)
        profile.dump_stats(str(profile_out))
    row = {"model": name, "budget": budget, "trace_and_plan_s": total_s, "trace_and_plan_cpu_s": cpu_s,
           "profiled": profile is not None}
    for phase, (calls, wall_s, phase_cpu_s) in phases.items():
        row[f"{phase}_s"], row[f"{phase}_cpu_s"] = wall_s, phase_cpu_s
    for count, phase in COUNTS.items():
        row[count] = phases[phase][0]
    pr = plan.predicted
    row.update(step_ms=pr["step_ms"], baseline_step_ms=pr["baseline_step_ms"],
               activation_peak_mib=pr["activation_peak_bytes"] / 2**20,
               baseline_activation_peak_mib=pr["baseline_activation_peak_bytes"] / 2**20,
               saved=len(plan.decisions), summary=plan.summary())
    return row


def _budget(text: str):
    return text if text == "auto" else float(text)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="gpt,llama", help="comma-separated: gpt, llama, vit, resnet, "
                   "medium, small, tiny")
    p.add_argument("--budgets", default="auto,0.5")
    p.add_argument("--out", default=None, help="write the rows here as JSON")
    p.add_argument("--profile-out", default=None,
                   help="folder for each row's cProfile stats (MODEL_BUDGET.prof)")
    p.add_argument("--top", type=int, default=0,
                   help="print each row's N functions of most own time")
    p.add_argument("-v", "--verbose", action="store_true", help="log each planning phase (INFO)")
    args = p.parse_args(argv)
    if args.verbose:
        import logging

        logging.basicConfig(level=logging.INFO, format="%(message)s")
    rows, not_run = [], []
    for name in args.models.split(","):
        for text in args.budgets.split(","):
            budget = _budget(text)
            prof = Path(args.profile_out) / f"{name}_{text}.prof" if args.profile_out else None
            try:
                row = measure(name, budget, prof)
            except ImportError as e:
                not_run.append(f"{name}: not run ({e})")
                break
            rows.append(row)
            print(f"{name} {text}: {row['summary']}", flush=True)
            if args.top and prof is not None:
                pstats.Stats(str(prof)).sort_stats("tottime").print_stats(args.top)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"hardware": H100_PROFILE, "rows": rows,
                                              "not_run": not_run}, indent=1))
    print(tabulate([[r["model"], r["budget"], f"{r['trace_and_plan_s']:.1f}",
                     f"{r['trace_and_plan_cpu_s']:.1f}", f"{r['planning_cpu_s']:.1f}",
                     f"{r['min-cut_cpu_s']:.1f}", f"{r['gather_cpu_s']:.1f}", f"{r['solve_cpu_s']:.1f}",
                     f"{r['simulate_cpu_s']:.1f}", r["simulations"], r["min-cut partitions"], r["gathers"],
                     f"{r['activation_peak_mib']:.0f}", f"{r['step_ms'] / r['baseline_step_ms']:.3f}"]
                    for r in rows],
                   headers=["model", "budget", "trace+plan s", "CPU s", "planning CPU s", "min-cut CPU s",
                            "gather CPU s", "solve CPU s", "simulate CPU s", "simulations", "min-cuts",
                            "gathers", "act peak MiB", "step vs base"]))
    for line in not_run:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
