"""What holds the memory at a training step's peak, against the planner's step peak.

    python benchmarks/memory_peak.py --preset h100 --strategies offload:0.2,inductor --out $OUT/m
    PYTHONPATH=$PWD python benchmarks/memory_peak.py --model benchmarks.zoo_models:llama \
        --blocks lm.model.layers --strategies full_ac,offload:0.125

For each strategy (the names of ``python -m offload_compiler compare``), in this
process, one after another: compile the example GPT (or ``--model``'s, with ``--blocks``
for ``sac`` and ``full_ac``), run ``--warmup`` steps and, for the backend, the steps it
takes to settle (its measurements and any re-plan), then one
step with the CUDA caching allocator's history on
(``torch.cuda.memory._record_memory_history``). From the history: the step's peak of
allocated bytes above what was held before it (``act``, as ``compare`` measures it),
and the allocations live at that peak, grouped by the line of Inductor's generated
code (or other Python) that made them, with the line's text. For ``offload:*``, also
the planner's predicted step peak and activation peak. Writes one JSON per strategy
and prints a table.

Needs CUDA.
"""

from __future__ import annotations

import argparse
import json
import linecache
import sys
from pathlib import Path

import torch
from tabulate import tabulate

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from offload_compiler.compare.run import DTYPES, Row, patched, setup_strategy  # noqa: E402


def _frame(f: dict) -> str:
    name = f.get("filename", "")
    text = linecache.getline(name, f.get("line", 0)).strip()
    return f"{Path(name).name}:{f.get('line')}  {text[:80]}"


def _site(frames: list[dict]) -> str:
    """The innermost frame in generated or user code (else the innermost of all):
    ``file:line  text``."""
    for f in frames:
        name = f.get("filename", "")
        if "torch/" in name and "torchinductor" not in name and "/tmp/" not in name:
            continue
        return _frame(f)
    return _frame(frames[0]) if frames else "?"


def live_at_peak(trace: list[dict]) -> tuple[int, int, list[tuple[dict, dict | None]]]:
    """From one device's allocator trace: (peak bytes above the start, index of the
    event that reached it, the allocations made in the trace and live then, each with
    the event that later frees it, or ``None``)."""
    live: dict[int, dict] = {}
    held, peak, peak_i, peak_live = 0, 0, -1, {}
    freed: dict[int, dict] = {}  # id of an alloc event -> its free event
    for i, e in enumerate(trace):
        if e["action"] == "alloc":
            held += e["size"]
            live[e["addr"]] = e
            if held > peak:
                peak, peak_i, peak_live = held, i, dict(live)
        elif e["action"] == "free_requested" and e["addr"] in live:
            a = live.pop(e["addr"])
            held -= a["size"]
            freed[id(a)] = e
    return peak, peak_i, [(a, freed.get(id(a))) for a in peak_live.values()]


def measure(name: str, spec: dict, top: int) -> dict:
    row = Row(strategy=name)
    device = torch.device(spec["device"])
    model, compiled, batch, _, patches = setup_strategy(spec, row)
    if compiled is None:
        raise SystemExit(f"{name}: {row.note}")

    def step():
        out = compiled(*batch)
        (out if out.dim() == 0 else out.float().mean()).backward()
        model.zero_grad(set_to_none=True)

    backend = getattr(compiled, "_offload_backend", None)
    with patched(patches):
        for _ in range(spec["warmup"]):
            step()
        if backend is not None:
            backend.settle(step)  # its measurements and any re-plan
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        torch.cuda.memory._record_memory_history(max_entries=1_000_000, stacks="python")
        step()
        torch.cuda.synchronize()
        snap = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
    act = torch.cuda.max_memory_allocated(device) - before
    trace = snap["device_traces"][device.index or 0]
    peak, at, live = live_at_peak(trace)
    sites: dict[str, int] = {}
    for e, free in live:
        site = _site(e.get("frames", []))
        if e["size"] >= 2**20:  # where it is freed tells what held it that long
            site += "  | freed at " + (_site(free.get("frames", [])) if free else "(after the step)")
        sites[site] = sites.get(site, 0) + e["size"]
    result = {"strategy": name, "act_gib": act / 2**30, "trace_peak_gib": peak / 2**30,
              "peak_site": _site(trace[at].get("frames", [])) if at >= 0 else "",
              "live_at_peak": sorted(([s, b / 2**20] for s, b in sites.items()),
                                     key=lambda x: -x[1])[:top]}
    if backend is not None and backend.plans:
        result.update(predicted(backend))
    return result


def predicted(backend) -> dict[str, float]:
    """The planner's step and activation peaks (GiB) summed over the plans the graphs run
    now: a plan a re-plan replaced no longer runs."""
    pr = [p.predicted for p in backend.current_plans if p.predicted]
    return {"predicted_step_peak_gib": sum(p.get("step_peak_bytes", 0) for p in pr) / 2**30,
            "predicted_activation_gib": sum(p.get("activation_peak_bytes", 0) for p in pr) / 2**30}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="h100")
    p.add_argument("--model", default=None, help="module:factory returning (model, inputs), in place of the preset")
    p.add_argument("--blocks", default=None, help="dotted path of the repeated blocks (sac, full_ac)")
    p.add_argument("--offload-options", default="{}", metavar="JSON",
                   help="extra backend options, a JSON object (as compare's)")
    p.add_argument("--strategies", default="inductor,offload:auto")
    p.add_argument("--dtype", default="bfloat16", choices=DTYPES)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--top", type=int, default=15, help="allocation sites to list per strategy")
    p.add_argument("--out", default=None, help="folder for one JSON per strategy")
    args = p.parse_args(argv)
    from offload_compiler.compare.cli import _offload_options

    try:
        extra = _offload_options(args.offload_options)
    except ValueError as e:
        p.error(f"--offload-options: {e}")
    if not torch.cuda.is_available():
        print("memory_peak.py needs CUDA", file=sys.stderr)
        return 2
    rows = []
    for name in args.strategies.split(","):
        spec = dict(strategy=name, preset=args.preset, model=args.model, device="cuda", dtype=args.dtype,
                    warmup=args.warmup, blocks=args.blocks, offload_options=extra)
        r = measure(name, spec, args.top)
        torch._dynamo.reset()
        torch.cuda.empty_cache()
        rows.append(r)
        print(f"== {name}: act {r['act_gib']:.2f} GiB, peak reached at {r['peak_site']}")
        for site, mib in r["live_at_peak"]:
            print(f"  {mib:9.1f} MiB  {site}")
        if args.out:
            Path(args.out).mkdir(parents=True, exist_ok=True)
            safe = name.replace(":", "_")
            (Path(args.out) / f"memory_peak_{safe}.json").write_text(json.dumps(r, indent=1))
    print(tabulate([[r["strategy"], f"{r['act_gib']:.2f}", f"{r['trace_peak_gib']:.2f}",
                     f"{r.get('predicted_step_peak_gib', float('nan')):.2f}",
                     f"{r.get('predicted_activation_gib', float('nan')):.2f}"] for r in rows],
                   headers=["strategy", "act GiB", "trace peak GiB", "pred step peak GiB",
                            "pred act peak GiB"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
