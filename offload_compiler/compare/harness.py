"""The comparison harness: every strategy on one model, side by side.

Compare the offload backend with the strategies a user would otherwise use, on their model.

    python -m offload_compiler compare --preset tiny --device cpu --steps 3 --out out/
    python -m offload_compiler compare --model mypkg.models:make --device cuda --budgets 0.5,0.2
    python -m offload_compiler compare --device cuda --compile per-block --distributed fsdp2 --nproc 2

Strategies: ``eager``; ``inductor``; ``full_ac`` (Inductor, every repeated block under
``torch.utils.checkpoint``); ``sac`` (Inductor, selective checkpointing saving matmul and
attention outputs, as torchtitan's op-level policy); ``budget:B`` (Inductor with
``torch._functorch.config.activation_memory_budget = B``); ``torch_offload`` (PyTorch's own
activation offloading, where the installed torch has it, applied to the SAC policy's
saved tensors by tagging them ``MUST_CPU_OFFLOAD``); ``offload:auto`` and
``offload:B`` (this backend). Each runs in its own process, so a failure or an
out-of-memory ends only its row.

For each: median step time (compilation and warm-up excluded, synchronised), peak
memory, activation memory (peak minus the memory held before forward), tokens (or
samples) per second, compile time (first step), and the first step's loss and gradient
norm, which every strategy must agree on (a disagreement is flagged).

``--compile per-block`` compiles every strategy one block at a time (the children of the
largest ``nn.ModuleList``, or of ``--blocks``; checkpointing still wraps each block), and
the offload rows with ``per_block=True``. ``--distributed ddp|fsdp2 --nproc N`` runs
each strategy on N processes (``distributed.py``); rank 0 reports, memory per rank.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from .distributed import KINDS
from .run import COMPILE_MODES, DTYPES, STRATEGY_HELP, Row

def strategies_for(requested: list[str] | None, budgets: list[float]) -> list[str]:
    if requested:
        for s in requested:
            base = s.split(":")[0]
            if base not in ("eager", "inductor", "full_ac", "sac", "budget", "torch_offload", "offload"):
                raise ValueError(f"unknown strategy {s!r}; valid strategies: {STRATEGY_HELP}")
        return requested
    out = ["eager", "inductor", "full_ac", "sac"]
    out += [f"budget:{b}" for b in budgets]
    out += ["torch_offload", "offload:auto"] + [f"offload:{b}" for b in budgets]
    return out


def compare(*, preset: str | None = "tiny", model: str | None = None, device: str = "cpu",
            dtype: str = "float32", steps: int = 5, warmup: int = 2,
            budgets: tuple[float, ...] = (0.5, 0.2), strategies: list[str] | None = None,
            blocks: str | None = None, out: str | Path | None = None,
            timeout_s: float = 1800, offload_options: dict[str, Any] | None = None,
            compile_mode: str = "whole", distributed: str | None = None, nproc: int = 2) -> list[Row]:
    """Run every strategy in its own process; returns the rows (also written to ``out``,
    rewritten after each row).

    ``offload_options`` are extra ``OffloadConfig`` options for the ``offload:*``
    strategies (``memory_budget`` and ``devices`` come from the strategy name).
    ``compile_mode``: ``"whole"`` or ``"per-block"``; ``distributed``: ``None``, ``"ddp"`` or
    ``"fsdp2"`` on ``nproc`` processes."""
    from ..config import OffloadConfig

    offload_options = dict(offload_options or {})
    fixed = sorted({"memory_budget", "devices"} & set(offload_options))
    if fixed:
        raise ValueError(f"offload_options may not set {fixed}: the strategy name sets them")
    OffloadConfig.from_options(offload_options)  # a bad option fails here, not per row
    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r}; valid dtypes are {DTYPES}")
    for b in budgets:
        if not 0 < b <= 1:
            raise ValueError(f"budget {b} must be in (0, 1]")
    _check_parallel(compile_mode, distributed, nproc)
    rows = []
    for name in strategies_for(strategies, list(budgets)):
        spec = dict(strategy=name, preset=preset, model=model, device=device, dtype=dtype,
                    steps=steps, warmup=warmup, blocks=blocks, offload_options=offload_options,
                    compile=compile_mode, distributed=distributed, nproc=nproc, timeout_s=timeout_s)
        rows.append(_run_in_subprocess(spec, timeout_s, Path(out) if out is not None else None))
        _flag_disagreements(rows, dtype)
        if out is not None:  # after every row: a run cut short keeps what it measured
            write_outputs(rows, Path(out), spec)
    return rows


def _check_parallel(compile_mode: str, distributed: str | None, nproc: int) -> None:
    if compile_mode not in COMPILE_MODES:
        raise ValueError(f"compile_mode={compile_mode!r} is not valid; choose one of {COMPILE_MODES}")
    if distributed is not None and distributed not in KINDS:
        raise ValueError(f"distributed={distributed!r} is not valid; choose None or one of {KINDS}")
    if isinstance(nproc, bool) or not isinstance(nproc, int) or nproc < 1:
        raise ValueError(f"nproc={nproc!r} is not valid; give a positive number of processes")


def _run_in_subprocess(spec: dict[str, Any], timeout_s: float, out: Path | None = None) -> Row:
    cmd = [sys.executable, "-m", "offload_compiler.compare", "--worker", json.dumps(spec)]
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        return Row(strategy=spec["strategy"], status="timeout", note=f"over {timeout_s:.0f} s")
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        safe = spec["strategy"].replace(":", "_")
        (out / f"{safe}.log").write_text(proc.stderr[-200_000:])
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{\"strategy\""):
            return Row(**json.loads(line))
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
    status = "oom" if "out of memory" in (proc.stderr or "").lower() else "failed"
    return Row(strategy=spec["strategy"], status=status, note=tail[0][:200])


def _flag_disagreements(rows: list[Row], dtype: str) -> None:
    ref = next((r for r in rows if r.status == "ok" and r.strategy == "eager"),
               next((r for r in rows if r.status == "ok"), None))
    if ref is None:
        return
    rtol = 1e-4 if dtype == "float32" else 3e-2
    for r in rows:
        if r.status != "ok":
            continue
        same_loss = math.isclose(r.loss, ref.loss, rel_tol=rtol, abs_tol=rtol)
        same_norm = math.isclose(r.grad_norm, ref.grad_norm, rel_tol=10 * rtol, abs_tol=rtol)
        r.agrees = "yes" if same_loss and same_norm else f"NO (vs {ref.strategy})"


def pareto(rows: list[Row]) -> set[str]:
    """Strategies no other beats on both activation memory and step time."""
    pts = [(r.activation_gib if r.activation_gib is not None else 0.0, r.step_ms, r.strategy)
           for r in rows if r.status == "ok" and r.step_ms is not None]
    front = set()
    for m, t, name in pts:
        if not any((m2 <= m and t2 <= t) and (m2 < m or t2 < t) for m2, t2, _ in pts):
            front.add(name)
    return front


def table(rows: list[Row]) -> str:
    from tabulate import tabulate

    front = pareto(rows)
    body = [[r.strategy + (" *" if r.strategy in front else ""), r.status, _f(r.step_ms, 1),
             _f(r.peak_gib, 2), _f(r.activation_gib, 2), _f(r.tokens_per_s, 0), _f(r.compile_s, 1),
             _f(r.loss, 4), _f(r.grad_norm, 4), r.agrees, r.note] for r in rows]
    headers = ["strategy", "status", "step ms", "peak GiB", "act GiB", "tok/s", "compile s",
               "loss", "grad norm", "agrees", "note"]
    return tabulate(body, headers=headers) + "\n* on the Pareto frontier (activation memory vs step time)"


def _f(x, digits):
    return "" if x is None else f"{x:.{digits}f}"


def write_outputs(rows: list[Row], out: Path, spec: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    import torch

    meta = {"torch": torch.__version__, "device": spec["device"], "dtype": spec["dtype"],
            "preset": spec["preset"], "model": spec["model"], "steps": spec["steps"],
            "compile": spec.get("compile", "whole"), "distributed": spec.get("distributed"),
            "nproc": spec.get("nproc") if spec.get("distributed") else 1,
            "command": " ".join(sys.argv)}
    if spec["device"].startswith("cuda") and torch.cuda.is_available():
        meta["gpu"] = torch.cuda.get_device_name()
    (out / "compare.json").write_text(json.dumps(
        {"meta": meta, "rows": [asdict(r) for r in rows], "pareto": sorted(pareto(rows))}, indent=2))
    (out / "compare.svg").write_text(svg_plot(rows))
    (out / "compare.txt").write_text(table(rows) + "\n")


def svg_plot(rows: list[Row], width: int = 640, height: int = 420) -> str:
    """Activation memory (x) against step time (y); frontier points filled."""
    pts = [(r.activation_gib or 0.0, r.step_ms, r.strategy) for r in rows
           if r.status == "ok" and r.step_ms is not None]
    front = pareto(rows)
    pad = 60
    xs = [p[0] for p in pts] or [0, 1]
    ys = [p[1] for p in pts] or [0, 1]
    x0, x1 = 0.0, max(xs) * 1.1 or 1.0
    y0, y1 = 0.0, max(ys) * 1.1 or 1.0

    def sx(x): return pad + (x - x0) / (x1 - x0) * (width - 2 * pad)
    def sy(y): return height - pad - (y - y0) / (y1 - y0) * (height - 2 * pad)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'font-family="sans-serif" font-size="11">',
             f'<rect width="{width}" height="{height}" fill="white"/>',
             f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" stroke="black"/>',
             f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{height - pad}" stroke="black"/>',
             f'<text x="{width / 2}" y="{height - 20}" text-anchor="middle">activation memory (GiB)</text>',
             f'<text x="15" y="{height / 2}" transform="rotate(-90 15 {height / 2})" '
             f'text-anchor="middle">step time (ms)</text>',
             f'<text x="{pad}" y="{height - pad + 15}">{x0:.2f}</text>',
             f'<text x="{width - pad}" y="{height - pad + 15}" text-anchor="end">{x1:.2f}</text>',
             f'<text x="{pad - 5}" y="{height - pad}" text-anchor="end">{y0:.1f}</text>',
             f'<text x="{pad - 5}" y="{pad}" text-anchor="end">{y1:.1f}</text>']
    for x, y, name in pts:
        on = name in front
        parts.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="5" '
                     f'fill="{"#d62728" if on else "white"}" stroke="#d62728"/>')
        parts.append(f'<text x="{sx(x) + 7:.1f}" y="{sy(y) - 6:.1f}">{name}{" *" if on else ""}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def add_arguments(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group()
    src.add_argument("--preset", default="tiny", help="example GPT preset (tiny, medium, h100)")
    src.add_argument("--model", default=None, help="module:factory returning (model, batch)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default=None, choices=DTYPES,
                   help="default: float32 on CPU, bfloat16 on CUDA")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--budgets", default="0.5,0.2", help="comma-separated fractions")
    p.add_argument("--strategies", default=None, help=f"comma-separated subset of: {STRATEGY_HELP}")
    p.add_argument("--blocks", default=None, help="dotted path of the ModuleList of repeated blocks")
    p.add_argument("--out", default=None, help="folder for compare.json, compare.svg, compare.txt")
    p.add_argument("--timeout", type=float, default=1800, help="seconds per strategy")
    p.add_argument("--compile", default="whole", choices=COMPILE_MODES,
                   help="compile the whole model, or each block on its own (as torchtitan)")
    p.add_argument("--distributed", default=None, choices=KINDS,
                   help="run each strategy under DDP or FSDP2 on --nproc processes (rank 0 reports)")
    p.add_argument("--nproc", type=int, default=2, help="processes with --distributed (one GPU each)")
    p.add_argument("--offload-options", type=json.loads, default=None,
                   help='extra OffloadConfig options for the offload:* strategies, as JSON, '
                        'e.g. \'{"node_costs": "profile"}\'')


def main_compare(args: argparse.Namespace) -> int:
    dtype = args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32")
    budgets = tuple(float(b) for b in args.budgets.split(",") if b)
    strategies = args.strategies.split(",") if args.strategies else None
    rows = compare(preset=None if args.model else args.preset, model=args.model, device=args.device,
                   dtype=dtype, steps=args.steps, warmup=args.warmup, budgets=budgets,
                   strategies=strategies, blocks=args.blocks, out=args.out, timeout_s=args.timeout,
                   offload_options=args.offload_options, compile_mode=args.compile,
                   distributed=args.distributed, nproc=args.nproc)
    print(table(rows))
    return 0 if any(r.status == "ok" for r in rows) else 1
