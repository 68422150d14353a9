"""The comparison harness: every strategy on one model, side by side.

Compare the offload backend with the strategies a user would otherwise use, on their model.

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
samples) per second, compile time (first step; by default with cold caches, each row's
Inductor cache and plan cache empty), and the first step's loss and gradient
norm, which every strategy must agree on (a disagreement is flagged).

    python -m offload_compiler compare --device cuda --compile per-block --distributed fsdp2 --nproc 2

``--compile per-block`` compiles every strategy one block at a time (the children of the
largest ``nn.ModuleList``, or of ``--blocks``; checkpointing still wraps each block), and
the offload rows with ``per_block=True``. ``--distributed ddp|fsdp2 --nproc N`` runs
each strategy on N processes (``distributed.py``); rank 0 reports, memory per rank.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..reporting import plots
from .._version import SCHEMA_VERSION
from ..config import OffloadConfig, budget_from_text
from ..planning.cache import ENV_DIR as PLAN_CACHE_DIR
from ..planning.cache import cache_dir
from ..planning.hardware import copy_profiles
from .distributed import KINDS
from .run import COMPILE_MODES, DTYPES, STRATEGY_HELP, Row, fraction

log = logging.getLogger(__name__)

#: ``caches=``: each row's first step with empty compile caches, or with the caches as they are.
CACHES = ("cold", "warm")
#: Strategies without an argument; ``budget:B`` and ``offload:B`` take one.
PLAIN_STRATEGIES = ("eager", "inductor", "inductor-cudagraphs", "full_ac", "sac", "torch_offload")


def check_strategy(name: str) -> str:
    """``name`` if it is a valid strategy, else a ``ValueError`` saying why: ``offload:B``
    takes ``auto``, a fraction or bytes with a unit (``memory_budget``'s rules),
    ``budget:B`` a fraction (torch's ``activation_memory_budget``)."""
    base, sep, arg = name.partition(":")
    try:
        if base in PLAIN_STRATEGIES and not sep:
            return name
        if base in ("offload", "offload-cudagraphs") and sep:
            budget_from_text(arg)
            return name
        if base == "budget" and sep:
            fraction(arg)
            return name
        if base == "offload-limit" and sep:
            OffloadConfig(memory_limit=arg)
            return name
    except ValueError as error:
        raise ValueError(f"strategy {name!r}: {error}") from None
    raise ValueError(f"unknown strategy {name!r}; valid strategies: {STRATEGY_HELP}")


def strategies_for(requested: list[str] | None, budgets: list[float]) -> list[str]:
    if requested:
        return [check_strategy(s) for s in requested]
    out = ["eager", "inductor", "full_ac", "sac"]
    out += [f"budget:{b}" for b in budgets]
    out += ["torch_offload", "offload:auto"] + [f"offload:{b}" for b in budgets]
    return out


def compare(*, preset: str | None = "tiny", model: str | None = None, device: str = "cpu",
            dtype: str = "float32", steps: int = 5, warmup: int = 2,
            budgets: tuple[float, ...] = (0.5, 0.2), strategies: list[str] | None = None,
            blocks: str | None = None, out: str | Path | None = None,
            timeout_s: float = 1800, offload_options: dict[str, Any] | None = None,
            compile_mode: str = "whole", distributed: str | None = None, nproc: int = 2,
            caches: str = "cold") -> list[Row]:
    """Run every strategy in its own process; returns the rows (also written to ``out``,
    rewritten after each row).

    ``caches``: ``"cold"`` (default) runs each row with an empty Inductor cache (its FX
    graph, AOTAutograd and Triton caches in a fresh folder) and an empty plan cache, so
    each row's first step is a first compile (the plan made and stored, as a user's first
    compile has it) and no row gains from kernels or plans an earlier row made;
    ``"warm"`` leaves the caches as the environment has them. The GPU's hardware profile
    (calibrated once per GPU) is read from the package's cache folder either way.

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
        try:
            fraction(b)
        except ValueError as error:
            raise ValueError(f"budgets: {error}") from None
    _check_parallel(compile_mode, distributed, nproc)
    if caches not in CACHES:
        raise ValueError(f"caches={caches!r} is not valid; choose one of {CACHES}")
    rows = []
    names = strategies_for(strategies, list(budgets))
    for i, name in enumerate(names, 1):
        spec = dict(strategy=name, preset=preset, model=model, device=device, dtype=dtype,
                    steps=steps, warmup=warmup, blocks=blocks, offload_options=offload_options,
                    compile=compile_mode, distributed=distributed, nproc=nproc, timeout_s=timeout_s)
        log.info("compare: [%d/%d] %s: started", i, len(names), name)
        t0 = time.perf_counter()
        with _worker_env(caches) as env:
            rows.append(_run_in_subprocess(spec, timeout_s, Path(out) if out is not None else None, env))
        row = rows[-1]
        log.info("compare: [%d/%d] %s: %s in %.1f s%s", i, len(names), name, row.status,
                 time.perf_counter() - t0, f" ({row.note})" if row.status != "ok" and row.note else "")
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


@contextlib.contextmanager
def _worker_env(caches: str) -> Iterator[dict[str, str]]:
    """The environment of one row's process: with ``caches="cold"``, Inductor's caches
    and the plan cache in a fresh folder (removed after the row), as a user's first
    compile has them: the plan is made and stored. The calibrated hardware profiles are
    copied in, and one the row calibrated is copied back to the package's cache folder,
    so that no later row calibrates again."""
    env = dict(os.environ)
    if caches == "warm":
        yield env
        return
    with tempfile.TemporaryDirectory(prefix="offload-compare-cache-") as folder:
        env["TORCHINDUCTOR_CACHE_DIR"] = folder  # the FX graph and AOTAutograd caches
        env.pop("TRITON_CACHE_DIR", None)  # then Triton's cache is under it, as Inductor puts it
        plans = Path(folder) / "offload_compiler"
        copy_profiles(cache_dir(), plans)
        env[PLAN_CACHE_DIR] = str(plans)
        try:
            yield env
        finally:
            copy_profiles(plans, cache_dir())


def _run_in_subprocess(spec: dict[str, Any], timeout_s: float, out: Path | None = None,
                       env: dict[str, str] | None = None) -> Row:
    cmd = [sys.executable, "-m", "offload_compiler.compare", "--worker", json.dumps(spec)]
    env = dict(os.environ if env is None else env)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired as e:
        # The worker's log up to the limit is kept, and its last line says what it was doing.
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        _write_log(out, spec, err)
        last = err.strip().splitlines()[-1:] or ["no output"]
        return Row(strategy=spec["strategy"], status="timeout",
                   note=f"over {timeout_s:.0f} s; last logged: {last[0][:160]}")
    _write_log(out, spec, proc.stderr)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{\"strategy\""):
            return Row(**json.loads(line))
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
    status = "oom" if "out of memory" in (proc.stderr or "").lower() else "failed"
    return Row(strategy=spec["strategy"], status=status, note=tail[0][:200])


def _write_log(out: Path | None, spec: dict[str, Any], text: str) -> None:
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        safe = spec["strategy"].replace(":", "_")
        (out / f"{safe}.log").write_text(text[-200_000:])


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
    """Strategies no other beats on both measured activation memory and step time. Rows
    without measured memory (every row on CPU) are on no frontier: their memory is
    unknown, not zero."""
    pts = [(r.activation_gib, r.step_ms, r.strategy) for r in rows
           if r.status == "ok" and r.step_ms is not None and r.activation_gib is not None]
    front = set()
    for m, t, name in pts:
        if not any((m2 <= m and t2 <= t) and (m2 < m or t2 < t) for m2, t2, _ in pts):
            front.add(name)
    return front


def table(rows: list[Row]) -> str:
    from tabulate import tabulate

    front = pareto(rows)
    body = [[r.strategy + (" *" if r.strategy in front else ""), r.status, _f(r.step_ms, 1),
             _f(r.extra.get("host_step_ms"), 1), _f(r.peak_gib, 2), _f(r.activation_gib, 2),
             _f(r.tokens_per_s, 0), _f(r.compile_s, 1), _f(r.loss, 4), _f(r.grad_norm, 4), r.agrees, r.note]
            for r in rows]
    headers = ["strategy", "status", "step ms", "host ms", "peak GiB", "act GiB", "tok/s", "compile s",
               "loss", "grad norm", "agrees", "note"]
    note = ("* on the Pareto frontier (measured activation memory vs step time)" if front else
            "no activation memory measured (it is measured on CUDA only): no Pareto frontier")
    host = "host ms: the host's time to issue a synchronised step; near the step, the host sets the pace"
    return tabulate(body, headers=headers) + "\n" + note + "\n" + host


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
        {"schema_version": SCHEMA_VERSION, "meta": meta, "rows": [asdict(r) for r in rows],
         "pareto": sorted(pareto(rows))}, indent=2))
    (out / "compare.txt").write_text(table(rows) + "\n")
    plots.save_or_warn(lambda: plots.compare_figure(rows, meta=meta, frontier=pareto(rows)),
                       out / "compare.png", "compare.png (the comparison plot)")
