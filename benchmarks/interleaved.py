"""Strategies compared in one process, their steps interleaved: a paired step ratio.

    PYTHONPATH=$PWD python benchmarks/interleaved.py --model benchmarks/zoo_models.py:resnet50 \
        --dtype float32 --strategies inductor,offload:auto --rounds 6 --steps 8
    python benchmarks/interleaved.py --model benchmarks/zoo_models.py:tiny_gpt --device cpu \
        --strategies inductor,offload:none,offload:0.5 --rounds 2 --steps 1

``compare`` and ``zoo.py`` run each strategy in a process of its own. On the lent GPU
machines the host's speed differs between processes and drifts within one (its time to
issue the same step moved by up to 2x: ``RESULTS.md``, sessions 31 to 35), and a
difference of a few percent between two rows can be the host's. Here every strategy is
compiled in one process on one model (the weights shared; Dynamo keeps one compiled
entry per backend), run until settled (the backend's measurements and any re-plan over),
then timed in rounds: each round runs ``--steps`` steps back to back of each strategy in
turn, the order rotated every round, then one synchronised step of each, whose host
time to issue it is recorded, with the garbage collections over the round's steps of
each strategy (``gc``: count and milliseconds; the round's line prints both). A
strategy's ratio is the median, over rounds, of its back-to-back step over the first
strategy's in the same round (paired: a slow spell of the host falls on both), with its
range. Strategies: ``inductor``, ``offload:auto``,
``offload:B`` (a fraction in (0, 1] or bytes with a unit), ``offload:none`` (the
backend with nothing moved), and ``sac`` and ``full_ac`` (Inductor, each repeated block
under selective or full activation checkpointing, as ``compare`` runs them: the blocks
are ``--blocks``, a dotted path, or the largest ``nn.ModuleList``; these run on a copy
of the model with the same weights, since checkpointing wraps the blocks' forwards). On CUDA each round's synchronised step also records its
activation memory: the allocator's peak over the step less what was allocated before it
(``compare``'s act GiB); the table gives its median and its ratio to the first strategy's.

``--host-profile N``: after the rounds, N synchronised steps of each strategy under
``cProfile``, so where the host spends a step can be compared between strategies: the
functions with the most time of their own (Python and the C calls they make; the wait
for the device is in ``synchronize`` alone, since every step is synchronised).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: Strategies that checkpoint the repeated blocks (Inductor), and how ``compare`` wraps them.
CHECKPOINTED = {"sac": "sac", "full_ac": "full"}


def strategy_model(strategy: str, model, blocks: str | None):
    """The module ``strategy`` compiles: ``model`` itself, or for ``sac`` and ``full_ac`` a
    copy (same weights) whose blocks (``blocks``: a dotted path; ``None``: the largest
    ``nn.ModuleList``) run under checkpointing."""
    if strategy not in CHECKPOINTED:
        return model
    import copy

    from offload_compiler.compare.run import find_blocks, wrap_blocks

    twin = copy.deepcopy(model)
    wrap_blocks(find_blocks(twin, blocks), CHECKPOINTED[strategy])
    return twin


def backend_options(strategy: str, extra: dict[str, Any]) -> dict[str, Any] | None:
    """The backend's options for ``strategy`` (``None``: Inductor); a bad name raises,
    naming the valid ones."""
    from offload_compiler.config import OffloadConfig, budget_from_text

    if strategy in CHECKPOINTED or strategy == "inductor":
        return None
    base, _, arg = strategy.partition(":")
    valid = ("valid strategies: inductor, sac, full_ac, offload:auto, offload:none, offload:B (B a "
             "fraction in (0, 1] or bytes with a unit)")
    if base != "offload" or not arg:
        raise ValueError(f"unknown strategy {strategy!r}; {valid}")
    try:
        chosen = {"policy": "none"} if arg == "none" else {"memory_budget": budget_from_text(arg)}
    except ValueError as e:
        raise ValueError(f"unknown strategy {strategy!r} ({e}); {valid}") from None
    options = {**extra, **chosen}
    OffloadConfig.from_options(options)  # a bad option fails here, before anything compiles
    return options


def cuda_activation(device: str) -> tuple[Callable[[], int], Callable[[int], int]]:
    """``(begin, end)``: ``begin()`` resets the allocator's peak and returns what is
    allocated; ``end(before)`` the peak since, less ``before`` (bytes)."""
    import torch

    def begin() -> int:
        torch.cuda.reset_peak_memory_stats(device)
        return torch.cuda.memory_allocated(device)

    def end(before: int) -> int:
        return torch.cuda.max_memory_allocated(device) - before
    return begin, end


def interleave(model, args: tuple, kwargs: dict, strategies: list[str], *, rounds: int, steps: int,
               warmup: int, device: str, extra: dict[str, Any] | None = None,
               host_profile: int = 0, say: Callable[[str], None] = print,
               meter: tuple[Callable[[], int], Callable[[int], int]] | None = None,
               blocks: str | None = None) -> dict[str, Any]:
    """Compile ``model`` under each strategy, settle each, time them in ``rounds`` rounds
    (module docstring); returns per strategy its rounds' back-to-back steps, host times,
    paired ratios to the first strategy, garbage collections (``"gc"``: per round, count
    and ms) and, with a ``meter`` (on CUDA: :func:`cuda_activation`), activation memory
    (``"act_gib"``), and with ``host_profile`` steps its profile (``"profile"``: the top
    functions by own time, as text)."""
    import torch

    import offload_compiler
    from offload_compiler.gc_scope import collections_timed

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    def stepper(fn, owner):
        def step() -> None:
            out = fn(*args, **kwargs)
            (out if out.dim() == 0 else out.float().mean()).backward()
            owner.zero_grad(set_to_none=True)
        return step

    if meter is None and device.startswith("cuda"):
        meter = cuda_activation(device)
    compiled = {}
    for s in strategies:
        options = backend_options(s, extra or {})
        backend = None if options is None else offload_compiler.make_backend(**options)
        owner = strategy_model(s, model, blocks)
        step = stepper(torch.compile(owner) if backend is None else torch.compile(owner, backend=backend), owner)
        say(f"interleaved: {s}: compiling and settling...")
        t0 = time.perf_counter()
        for _ in range(warmup):
            step()
        settle = 0 if backend is None else backend.settle(step)  # its measurements, any re-plan
        sync()
        say(f"interleaved: {s}: ready in {time.perf_counter() - t0:.1f} s ({settle} settling steps)")
        compiled[s] = step
    got: dict[str, dict[str, list[float]]] = {
        s: {"step_ms": [], "host_ms": [], "gc": [], **({"act_gib": []} if meter else {})} for s in strategies}
    for r in range(rounds):
        order = strategies[r % len(strategies):] + strategies[:r % len(strategies)]
        for s in order:
            step = compiled[s]
            sync()
            with collections_timed() as collected:  # [count, ms] over the round's steps of ``s``
                t0 = time.perf_counter()
                for _ in range(steps):
                    step()
                sync()
                got[s]["step_ms"].append((time.perf_counter() - t0) * 1e3 / steps)
                before = meter[0]() if meter else 0
                t0 = time.perf_counter()
                step()
                got[s]["host_ms"].append((time.perf_counter() - t0) * 1e3)  # issued; the device may still run it
                sync()
            got[s]["gc"].append([collected.count, collected.ms])
            if meter:
                got[s]["act_gib"].append(meter[1](before) / 2**30)
        say(f"interleaved: round {r + 1}/{rounds}: " + ", ".join(
            f"{s} {got[s]['step_ms'][-1]:.2f} ms (host {got[s]['host_ms'][-1]:.1f} ms, "
            f"{got[s]['gc'][-1][0]} collections {got[s]['gc'][-1][1]:.1f} ms)" for s in strategies))
    first = got[strategies[0]]["step_ms"]
    for s in strategies:
        got[s]["ratio"] = [a / b for a, b in zip(got[s]["step_ms"], first)]
    for s in strategies if host_profile else ():
        say(f"interleaved: {s}: {host_profile} steps under cProfile...")
        got[s]["profile"] = profiled(compiled[s], host_profile, sync)
    return got


def profiled(step: Callable[[], None], steps: int, sync: Callable[[], None], top: int = 30) -> str:
    """``steps`` synchronised steps under ``cProfile``: the ``top`` functions by own time,
    as ``pstats`` prints them, then the ``top`` of the backend's own functions and of the
    graphs' generated code by cumulative time (the transfer ops' bodies, the host pool; in
    session 49 the first list alone left most of a plan's extra host time unnamed)."""
    profile = cProfile.Profile()
    for _ in range(steps):
        profile.enable()
        step()
        sync()
        profile.disable()
    text = io.StringIO()
    stats = pstats.Stats(profile, stream=text)
    print(f"{steps} synchronised steps; times are for all of them", file=text)
    stats.sort_stats("tottime").print_stats(top)
    print("the backend's functions and the graphs' generated code, by cumulative time:", file=text)
    stats.sort_stats("cumulative").print_stats(r"offload_compiler|torchinductor", top)
    return text.getvalue()


def table(got: dict[str, Any]) -> str:
    from tabulate import tabulate

    first = next(iter(got))
    memory = all(g.get("act_gib") for g in got.values())
    act = {s: statistics.median(g["act_gib"]) for s, g in got.items()} if memory else {}
    body = [[s, f"{statistics.median(g['step_ms']):.2f}", f"{min(g['step_ms']):.2f} to {max(g['step_ms']):.2f}",
             f"{statistics.median(g['ratio']):.3f}", f"{min(g['ratio']):.3f} to {max(g['ratio']):.3f}",
             f"{statistics.median(g['host_ms']):.2f}"]
            + ([f"{act[s]:.2f}", f"{act[s] / act[first]:.3f}" if act[first] else ""] if memory else [])
            for s, g in got.items()]
    headers = (["strategy", "step ms", "range", f"x {first} (paired)", "range", "host ms"]
               + (["act GiB", f"x {first} act"] if memory else []))
    return (tabulate(body, headers=headers, disable_numparse=True) + f"\nstep ms: back to back, the median over rounds; x {first}: "
            "each round's step over the first strategy's in that round; host ms: the host's time "
            "to issue a synchronised step" + ("; act GiB: the synchronised step's peak above what was "
                                              "allocated before it, the median over rounds" if memory else ""))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python benchmarks/interleaved.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="module:function or file.py:function returning (model, inputs)")
    p.add_argument("--strategies", default="inductor,offload:auto",
                   help="comma-separated: inductor, sac, full_ac, offload:auto, offload:none, offload:B; "
                        "the first is the reference")
    p.add_argument("--blocks", default=None, metavar="PATH",
                   help="dotted path of the repeated blocks sac and full_ac checkpoint (default: the "
                        "largest nn.ModuleList)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="bfloat16", help="the weights' dtype (float32 for models under autocast)")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--steps", type=int, default=8, help="back-to-back steps per strategy per round")
    p.add_argument("--warmup", type=int, default=3, help="steps before settling")
    p.add_argument("--offload-options", default="{}", metavar="JSON",
                   help="extra backend options, a JSON object (as compare's; not memory_budget nor devices)")
    p.add_argument("--host-profile", type=int, default=0, metavar="N",
                   help="after the rounds, profile N synchronised steps of each strategy (cProfile) "
                        "and print each one's top functions by own time")
    p.add_argument("--json", default=None, help="write every round's figures to this file")
    a = p.parse_args(argv)
    strategies = [s for s in a.strategies.split(",") if s]
    from offload_compiler.compare.cli import _offload_options

    try:
        try:
            extra = _offload_options(a.offload_options)  # parsed and validated as compare's and zoo.py's
        except ValueError as e:
            raise ValueError(f"--offload-options: {e}") from None
        for s in strategies:
            backend_options(s, extra)
        if len(set(strategies)) != len(strategies) or not strategies:
            raise ValueError(f"--strategies: give each strategy once, at least one; got {a.strategies!r}")
        if a.rounds < 1 or a.steps < 1 or a.warmup < 1:
            raise ValueError("--rounds, --steps and --warmup must be at least 1")
        if a.host_profile < 0:
            raise ValueError(f"--host-profile must be 0 (off) or more steps; got {a.host_profile}")
        if a.blocks and not CHECKPOINTED.keys() & set(strategies):
            raise ValueError("--blocks names the blocks sac and full_ac checkpoint; neither is in --strategies")
    except ValueError as e:
        p.error(str(e))

    import logging

    import torch

    from offload_compiler.reporting.explain_cli import load_factory, split_inputs

    # The backend's one line per graph plan, measurement and re-plan, as compare shows them.
    logging.basicConfig(level=logging.WARNING, format="%(message)s", stream=sys.stderr)
    logging.getLogger("offload_compiler").setLevel(logging.INFO)

    try:
        dtype = getattr(torch, a.dtype)
        model, inputs = load_factory(a.model)()
        args, kwargs = split_inputs(inputs)
        if CHECKPOINTED.keys() & set(strategies):
            from offload_compiler.compare.run import find_blocks

            try:
                find_blocks(model, a.blocks)
            except AttributeError:
                raise ValueError(f"--blocks {a.blocks!r}: the model has no such attribute") from None
    except (ValueError, AttributeError) as e:
        p.error(str(e))

    def place(x):
        if isinstance(x, torch.Tensor):
            return x.to(a.device, dtype) if x.is_floating_point() else x.to(a.device)
        return x

    model = model.to(a.device, dtype)
    args, kwargs = tuple(place(x) for x in args), {k: place(v) for k, v in kwargs.items()}
    got = interleave(model, args, kwargs, strategies, rounds=a.rounds, steps=a.steps, warmup=a.warmup,
                     device=a.device, extra=extra, host_profile=a.host_profile, blocks=a.blocks)
    if a.json:
        Path(a.json).write_text(json.dumps(got, indent=1))
    for s, g in got.items():
        if "profile" in g:
            print(f"--- {s}: the host's time by function ---\n{g['profile']}")
    print(table(got))
    return 0


if __name__ == "__main__":
    sys.exit(main())
