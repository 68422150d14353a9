"""Compare the offload backend with the strategies a user would otherwise use, on their model.

    python -m offload_compiler compare --preset tiny --device cpu --steps 3 --out out/
    python -m offload_compiler compare --model mypkg.models:make --device cuda --budgets 0.5,0.2

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
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import math
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

STRATEGY_HELP = "eager, inductor, full_ac, sac, budget:B, torch_offload, offload:auto, offload:B"
DTYPES = ("float32", "bfloat16", "float16")


@dataclass
class Row:
    strategy: str
    status: str = "ok"
    step_ms: float | None = None
    peak_gib: float | None = None
    activation_gib: float | None = None
    tokens_per_s: float | None = None
    compile_s: float | None = None
    loss: float | None = None
    grad_norm: float | None = None
    agrees: str = ""
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------------
# model loading
# ---------------------------------------------------------------------------------
def load_model(spec: dict[str, Any]):
    """(model, batch, tokens_per_batch) from a preset of the example GPT or a factory."""
    import torch

    if spec.get("model"):
        module_name, _, attr = spec["model"].partition(":")
        if not attr:
            raise ValueError(f"--model {spec['model']!r}: give module:factory")
        factory = getattr(importlib.import_module(module_name), attr)
        model, batch = factory()
        batch = tuple(batch) if isinstance(batch, (tuple, list)) else (batch,)
        first = next((b for b in batch if isinstance(b, torch.Tensor)), None)
        tokens = first.numel() if first is not None and not first.is_floating_point() else (
            first.shape[0] if first is not None else 1)
        return model, batch, tokens
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    from gpt import GPT, make_batch, preset

    cfg = preset(spec["preset"])
    torch.manual_seed(0)
    model = GPT(cfg)
    idx, tgt = make_batch(cfg)
    return model, (idx, tgt), idx.numel()


def find_blocks(model, path: str | None):
    """The repeated blocks: ``path`` (dotted attribute of a ModuleList), or the largest
    ModuleList in the model."""
    import torch.nn as nn

    if path:
        obj = model
        for part in path.split("."):
            obj = getattr(obj, part)
        return obj
    lists = [m for m in model.modules() if isinstance(m, nn.ModuleList) and len(m) > 0]
    if not lists:
        raise ValueError("no nn.ModuleList of blocks found; name one with --blocks")
    return max(lists, key=len)


def _sac_policy(tag_saved=None):
    import torch
    from torch.utils.checkpoint import CheckpointPolicy

    tag_saved = tag_saved or CheckpointPolicy.MUST_SAVE

    aten = torch.ops.aten
    save = {aten.mm.default, aten.addmm.default, aten.bmm.default}
    for name in ("_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
                 "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu"):
        if hasattr(aten, name):
            save.add(getattr(aten, name).default)

    def policy(ctx, op, *args, **kwargs):
        return tag_saved if op in save else CheckpointPolicy.PREFER_RECOMPUTE

    return policy


def wrap_blocks(blocks, mode: str) -> None:
    """Put every block's forward under checkpointing: ``full``, ``sac``, or ``offload``
    (SAC whose saved matmul and attention outputs are tagged ``MUST_CPU_OFFLOAD``, which
    PyTorch's own activation offloading acts on)."""
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    for block in blocks:
        inner = block.forward
        if mode == "full":
            block.forward = functools.partial(_ckpt, inner, None)
        else:
            tag = CheckpointPolicy.MUST_CPU_OFFLOAD if mode == "offload" else CheckpointPolicy.MUST_SAVE
            ctx = functools.partial(create_selective_checkpoint_contexts, _sac_policy(tag))
            block.forward = functools.partial(_ckpt, inner, ctx)


def _ckpt(fn, context_fn, *args, **kwargs):
    from torch.utils.checkpoint import checkpoint

    if context_fn is None:
        return checkpoint(fn, *args, use_reentrant=False, **kwargs)
    return checkpoint(fn, *args, use_reentrant=False, context_fn=context_fn, **kwargs)


# ---------------------------------------------------------------------------------
# one strategy, in its own process
# ---------------------------------------------------------------------------------
def setup_strategy(spec: dict[str, Any], row: Row):
    """The model of ``spec`` on its device and dtype, compiled with ``spec``'s strategy:
    ``(model, compiled, batch, tokens, patches)``; ``compiled`` is ``None`` when the
    strategy is unsupported (``row`` says why). Run it under ``patched(patches)``."""
    import torch

    device = torch.device(spec["device"])
    model, batch, tokens = load_model(spec)
    model = model.to(device=device, dtype=getattr(torch, spec["dtype"]))
    batch = tuple(b.to(device) if isinstance(b, torch.Tensor) else b for b in batch)
    compiled, patches = _prepare(spec["strategy"], model, spec, row)
    return model, compiled, batch, tokens, patches


def run_strategy(spec: dict[str, Any]) -> Row:
    import torch

    row = Row(strategy=spec["strategy"])
    device = torch.device(spec["device"])
    model, compiled, batch, tokens, patches = setup_strategy(spec, row)
    if compiled is None:
        return row

    after_forward: list[int] = []

    def step(record: bool = False):
        out = compiled(*batch)
        if record and device.type == "cuda":
            after_forward.append(torch.cuda.memory_allocated(device))
        loss = out if out.dim() == 0 else out.float().mean()
        loss.backward()
        return loss

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    with patched(patches):
        t0 = time.perf_counter()
        loss = step()
        sync()
        row.compile_s = time.perf_counter() - t0
        row.loss = float(loss)
        grads = [p.grad.float().norm() for p in model.parameters() if p.grad is not None]
        row.grad_norm = float(torch.stack(grads).norm()) if grads else 0.0
        model.zero_grad(set_to_none=True)
        for _ in range(spec["warmup"]):
            step()
            model.zero_grad(set_to_none=True)
        times, act, peaks, held = [], [], [], []
        for _ in range(spec["steps"]):
            sync()
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
                before = torch.cuda.memory_allocated(device)
            t0 = time.perf_counter()
            step(record=True)
            sync()
            times.append((time.perf_counter() - t0) * 1e3)
            if device.type == "cuda":
                peaks.append(torch.cuda.max_memory_allocated(device))
                act.append(peaks[-1] - before)
                held.append(after_forward[-1] - before)
            model.zero_grad(set_to_none=True)
    row.step_ms = statistics.median(times)
    row.tokens_per_s = tokens / (row.step_ms / 1e3)
    if peaks:
        row.peak_gib = max(peaks) / 2**30
        row.activation_gib = max(act) / 2**30
        row.extra["held_after_forward_gib"] = max(held) / 2**30
    backend = getattr(compiled, "_offload_backend", None)
    if backend is not None and backend.plans:
        p = backend.plans[0].predicted
        if p:
            row.extra["predicted_step_ms"] = sum(b.predicted.get("step_ms", 0) for b in backend.plans)
            row.extra["predicted_baseline_step_ms"] = sum(
                b.predicted.get("baseline_step_ms", 0) for b in backend.plans)
            row.extra["predicted_activation_gib"] = sum(
                b.predicted.get("activation_peak_bytes", 0) for b in backend.plans) / 2**30
            row.extra["predicted_baseline_activation_gib"] = sum(
                b.predicted.get("baseline_activation_peak_bytes", 0) for b in backend.plans) / 2**30
            row.extra["predicted_step_peak_gib"] = sum(
                b.predicted.get("step_peak_bytes", 0) for b in backend.plans) / 2**30
            row.extra["hardware"] = backend.plans[0].hardware
        row.extra["offloaded_gib"] = sum(b.offloaded_bytes for b in backend.plans) / 2**30
        row.extra["recomputed"] = sum(len(b.recomputed) for b in backend.plans)
    return row


def _prepare(name: str, model, spec: dict[str, Any], row: Row):
    import torch

    patches: dict[str, Any] = {}
    if name == "eager":
        return model, patches
    if name == "inductor":
        return torch.compile(model), patches
    if name in ("full_ac", "sac"):
        wrap_blocks(find_blocks(model, spec.get("blocks")), "full" if name == "full_ac" else "sac")
        return torch.compile(model), patches
    if name.startswith("budget:"):
        patches["activation_memory_budget"] = float(name.split(":", 1)[1])
        return torch.compile(model), patches
    if name == "torch_offload":
        import torch._functorch.config as fconfig

        if not hasattr(fconfig, "enable_activation_offloading"):
            row.status = "unsupported"
            row.note = f"torch {torch.__version__} has no activation offloading"
            return None, patches
        patches["enable_activation_offloading"] = True
        row.note = "SAC with matmul and attention outputs tagged MUST_CPU_OFFLOAD"
        wrap_blocks(find_blocks(model, spec.get("blocks")), "offload")
        return torch.compile(model), patches
    if name.startswith("offload:"):
        import offload_compiler

        budget = name.split(":", 1)[1]
        options = {**spec.get("offload_options", {}),
                   "memory_budget": "auto" if budget == "auto" else float(budget),
                   "devices": (spec["device"].split(":")[0],)}
        if spec["device"].startswith("cpu"):
            options["min_offload_bytes"] = 0
        backend = offload_compiler.make_backend(options)
        compiled = torch.compile(model, backend=backend)
        compiled._offload_backend = backend
        return compiled, patches
    raise ValueError(f"unknown strategy {name!r}; valid strategies: {STRATEGY_HELP}")


class patched:
    def __init__(self, patches: dict[str, Any]) -> None:
        self.patches = patches

    def __enter__(self):
        import torch._functorch.config as fconfig

        self.ctx = fconfig.patch(self.patches) if self.patches else None
        if self.ctx:
            self.ctx.__enter__()

    def __exit__(self, *exc):
        if self.ctx:
            self.ctx.__exit__(*exc)


# ---------------------------------------------------------------------------------
# driver
# ---------------------------------------------------------------------------------
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
            timeout_s: float = 1800, offload_options: dict[str, Any] | None = None) -> list[Row]:
    """Run every strategy in its own process; returns the rows (also written to ``out``,
    rewritten after each row).

    ``offload_options`` are extra ``OffloadConfig`` options for the ``offload:*``
    strategies (``memory_budget`` and ``devices`` come from the strategy name)."""
    from .config import OffloadConfig

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
    rows = []
    for name in strategies_for(strategies, list(budgets)):
        spec = dict(strategy=name, preset=preset, model=model, device=device, dtype=dtype,
                    steps=steps, warmup=warmup, blocks=blocks, offload_options=offload_options)
        rows.append(_run_in_subprocess(spec, timeout_s, Path(out) if out is not None else None))
        _flag_disagreements(rows, dtype)
        if out is not None:  # after every row: a run cut short keeps what it measured
            write_outputs(rows, Path(out), spec)
    return rows


def _run_in_subprocess(spec: dict[str, Any], timeout_s: float, out: Path | None = None) -> Row:
    cmd = [sys.executable, "-m", "offload_compiler.compare", "--worker", json.dumps(spec)]
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[1])
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
                   offload_options=args.offload_options)
    print(table(rows))
    return 0 if any(r.status == "ok" for r in rows) else 1


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        spec = json.loads(sys.argv[2])
        result = run_strategy(spec)
        print(json.dumps(asdict(result)))
    else:
        parser = argparse.ArgumentParser(prog="python -m offload_compiler.compare")
        add_arguments(parser)
        sys.exit(main_compare(parser.parse_args()))
