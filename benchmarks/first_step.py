"""Where a cold first training step goes: one zoo model, one strategy, timed from inside.

    python benchmarks/first_step.py --model vit --strategy offload:0.5
    python benchmarks/first_step.py --model llama --strategy inductor --profile --out out/fs

Runs a zoo model's first step (compile included) on the GPU, in this process, with
Inductor's caches in a fresh folder and the plan cache on in a fresh folder too (what a
user's first compile gets: the plan is made and stored; the machine's calibrated
hardware profile is copied in, so that no row calibrates); ``--plan-cache off`` turns
it off, as this script did before session 25 (and ``zoo.py --caches cold`` before
session 26). The model is ``zoo.py``'s (``--model`` takes its names; its factory and
weight dtype). Prints the seconds of the compile's phases (``dynamo_timed``), and the
wall seconds spent in each function of :data:`TIMED` (wrapped with a timer for the
step: calls, total, and when the first call began and the last ended, from the start of
the step), which sees what ``dynamo_timed`` does not (what a backend does around
``create_aot_dispatcher_function``). Installing the timers is not free: planning
ResNet-50 at 0.5 on a CPU, its rewrite took 0.9 s with all of them installed against
0.34 s with none (half of them: 0.4 s; the cause was not found), so ``--no-timers``
leaves them out. ``--profile`` also runs the step under ``cProfile`` (which about doubles
the time Python spends, and loses callers across Dynamo's frames; compare rows with each
other, not with ``zoo.py``'s) and writes it to ``OUT/<model>_<strategy>.prof`` for
``pstats``. ``--sample`` samples the step's Python stack every 2 ms on a thread
(``sampler.py``: no function wrapped), prints where the seconds inside Dynamo's
``call_user_compiler`` but outside AOTAutograd went, and writes the stacks to
``OUT/<model>_<strategy>.stacks.json.gz`` (``sampler.load``).

Strategies: ``inductor`` (``torch.compile``'s default), ``offload:auto``,
``offload:B`` (a fraction). Run the calibration first (``python -c "from
offload_compiler.planning.hardware import profile_for; profile_for('cuda')"``) so that
no row holds it.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from sampler import Sampler  # noqa: E402
from zoo import MODELS  # noqa: E402

#: Functions timed: (module, attribute path); the ones a row never calls show no calls.
TIMED = (
    ("torch._dynamo.output_graph", "OutputGraph.call_user_compiler"),
    ("torch._inductor.compile_fx", "compile_fx"),
    ("offload_compiler.backend", "OffloadBackend.__call__"),
    ("offload_compiler.backend", "OffloadBackend._compile_planned"),
    ("offload_compiler.backend", "_warn_if_nothing_offloadable"),
    ("offload_compiler.backend", "_uses_pool"),
    ("offload_compiler.backend", "_warm_compile_workers"),
    ("offload_compiler.backend", "_Collect.__call__"),
    ("offload_compiler.planning.limits", "initial"),
    ("offload_compiler.planning.cache", "key_for"),
    ("offload_compiler.planning.sizes", "PlanPerSize.for_graph"),
    ("offload_compiler.partitioner", "OffloadPartitioner.__call__"),
    ("offload_compiler.partitioner", "OffloadPartitioner._rewrite"),
    ("offload_compiler.partitioner", "OffloadPartitioner._report"),
    ("offload_compiler.partitioner", "OffloadPartitioner.uuid"),
    ("offload_compiler.partitioner", "plan_graph"),
    ("offload_compiler.partitioner", "_partition"),
    ("offload_compiler.replanning", "MeasuredGraph.__init__"),
    ("offload_compiler.replanning", "MeasuredGraph.__call__"),
    ("offload_compiler.runtime.pool", "HostPool.prefill"),
    ("offload_compiler.runtime.pool", "HostPool._wait_prefill"),
    ("offload_compiler.runtime.pool", "HostPool._pin_ahead"),
    ("offload_compiler.runtime.pool", "HostPool.register_graph"),
    ("offload_compiler.runtime.pool", "HostPool.acquire"),
)

#: AOTAutograd's own phases (torch 2.11 nests the graph capture and the forward's
#: compile in ``create_aot_dispatcher_function``; torch 2.13 calls them beside it).
AOT_PHASES = ("create_aot_dispatcher_function", "aot_stage1_graph_capture", "aot_stage2_compile")

#: Functions whose callees a ``--profile`` lists: (the end of the file's path, the name).
FOCUS = (("offload_compiler/backend.py", "__call__"), ("compile_fx.py", "compile_fx"))


class Timers:
    """Wall time per function of :data:`TIMED` while installed (any thread)."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()
        self.rows: dict[str, list[float]] = {}  # name -> [calls, seconds, first start, last end]
        self._undo: list = []

    def install(self) -> None:
        import importlib

        for module_name, path in TIMED:
            try:
                owner = importlib.import_module(module_name)
            except ImportError:
                continue
            *outer, attr = path.split(".")
            for part in outer:
                owner = getattr(owner, part, None)
            fn = getattr(owner, attr, None) if owner is not None else None
            if fn is None:
                continue
            self._undo.append((owner, attr, vars(owner).get(attr)))
            setattr(owner, attr, self._wrap(path, fn))

    def _wrap(self, name: str, fn):
        import functools

        row = self.rows.setdefault(name, [0, 0.0, None, None])

        @functools.wraps(fn)
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                end = time.perf_counter()
                row[0] += 1
                row[1] += end - start
                row[2] = start - self.t0 if row[2] is None else row[2]
                row[3] = end - self.t0
        return timed

    def uninstall(self) -> None:
        for owner, attr, original in reversed(self._undo):
            if original is None:  # inherited: the class's own attribute goes
                delattr(owner, attr)
            else:
                setattr(owner, attr, original)

    def table(self) -> str:
        lines = ["  calls  total s  first begins s  last ends s  function"]
        for name, (calls, total, first, last) in self.rows.items():
            if calls:
                lines.append(f"  {calls:5d}  {total:7.2f}  {first:14.2f}  {last:11.2f}  {name}")
        return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    whole = sorted(name for name, m in MODELS.items() if m.compile == "whole")
    p.add_argument("--model", required=True, choices=whole,
                   help="a model of benchmarks/zoo.py (compiled whole)")
    p.add_argument("--strategy", required=True, help="inductor, offload:auto or offload:B")
    p.add_argument("--no-timers", action="store_true", help="time no function (phases only)")
    p.add_argument("--profile", action="store_true", help="also run the step under cProfile")
    p.add_argument("--sample", action="store_true", help="sample the step's Python stack (sampler.py)")
    p.add_argument("--out", default=None, help="folder for the profile or the stacks")
    p.add_argument("--plan-cache", default="cold", choices=("cold", "off"),
                   help="cold: on, in a fresh folder (the default a user gets); off: turned off")
    p.add_argument("--top", type=int, default=12, help="callees listed per function (--profile)")
    args = p.parse_args(argv)
    kind, _, budget = args.strategy.partition(":")
    if kind not in ("inductor", "offload") or (kind == "offload" and not budget):
        p.error(f"--strategy {args.strategy!r}: give inductor, offload:auto or offload:B")
    if (args.profile or args.sample) and not args.out:
        p.error("--profile and --sample need --out (the folder for what they write)")

    import torch

    from offload_compiler.compare.run import compile_phases, fraction, load_model
    from offload_compiler.planning.cache import ENV_SWITCH

    try:
        value = budget if budget == "auto" or kind == "inductor" else fraction(budget)
    except ValueError as err:
        p.error(f"--strategy {args.strategy!r}: {err}")
    if not torch.cuda.is_available():
        p.error("no CUDA device: the first step is measured on the GPU")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="first-step-cache-")
    os.environ.pop("TRITON_CACHE_DIR", None)  # then Triton's cache is under it
    if args.plan_cache == "off":
        os.environ[ENV_SWITCH] = "0"
    else:
        _fresh_plan_cache()
    zoo_model = MODELS[args.model]
    model, batch, _ = load_model({"model": zoo_model.factory})
    model = model.to("cuda", getattr(torch, zoo_model.dtype))
    batch = [x.cuda() if isinstance(x, torch.Tensor) else x for x in batch]
    if kind == "inductor":
        compiled = torch.compile(model)
    else:
        compiled = torch.compile(model, backend="offload", options={"memory_budget": value})
    torch.cuda.synchronize()
    timers = Timers()
    if not args.no_timers:
        timers.install()
    prof = cProfile.Profile() if args.profile else None
    sampler = Sampler() if args.sample else None
    timers.t0 = t0 = time.perf_counter()
    if prof is not None:
        prof.enable()
    if sampler is not None:
        sampler.start()
    compiled(*batch).backward()
    torch.cuda.synchronize()
    if sampler is not None:
        sampler.stop()
    if prof is not None:
        prof.disable()
    took = time.perf_counter() - t0
    timers.uninstall()
    phases = compile_phases(0.0)
    part = phases.get("OffloadPartitioner", phases.get("min_cut_rematerialization_partition", 0.0))
    print(f"{args.model} {args.strategy}: first step {took:.1f} s{' (profiled)' if prof else ''}; "
          f"partitioner {part:.2f} s, forward compile "
          f"{phases.get('compile_fx.<locals>.fw_compiler_base', 0.0):.2f} s, backward compile "
          f"{phases.get('compile_fx.<locals>.bw_compiler', 0.0):.2f} s")
    print("  phases: " + ", ".join(f"{k} {v}" for k, v in phases.items() if v >= 0.1))
    if kind == "offload" and args.plan_cache == "cold":
        from offload_compiler.planning.cache import stored

        print(f"  plan cache: {len(stored())} plan(s) stored")
    if not args.no_timers:
        print(timers.table())
    if sampler is not None:
        name = f"{args.model}_{args.strategy.replace(':', '_')}"
        Path(args.out).mkdir(parents=True, exist_ok=True)
        sampler.save(str(Path(args.out) / f"{name}.stacks.json.gz"))
        print(sampler.table("call_user_compiler", AOT_PHASES, args.top + 30))
    if prof is not None:
        _report_profile(prof, Path(args.out) / f"{args.model}_{args.strategy.replace(':', '_')}.prof",
                        args.top)
    return 0


def _fresh_plan_cache() -> None:
    """Point the plan cache at an empty folder, with the calibrated hardware profiles of
    the current cache folder copied in (calibrating is once per machine, not per compile)."""
    from offload_compiler.planning.cache import ENV_DIR, cache_dir
    from offload_compiler.planning.hardware import copy_profiles

    fresh = Path(tempfile.mkdtemp(prefix="first-step-plans-"))
    copy_profiles(cache_dir(), fresh)
    os.environ[ENV_DIR] = str(fresh)


def _report_profile(prof: cProfile.Profile, path: Path, top: int) -> None:
    """Write ``prof`` to ``path``; print what each function of :data:`FOCUS` spent its
    time in (its ``top`` callees by cumulative seconds)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    prof.dump_stats(path)
    print(f"  profile: {path}")
    stats = pstats.Stats(str(path)).stats  # func -> (calls, ..., cumulative, callers)
    for where, name in FOCUS:
        for func, (_, _, _, cum, _) in stats.items():
            if func[2] != name or not func[0].endswith(where):
                continue
            print(f"  {func[2]} ({Path(func[0]).name}:{func[1]}): {cum:.2f} s, of which")
            callees = sorted(((callers[func][3], callee) for callee, (*_, callers) in stats.items()
                              if func in callers), reverse=True)
            for t, k in callees[:top]:
                print(f"      {t:6.2f}  {k[2]} ({Path(k[0]).name}:{k[1]})")


if __name__ == "__main__":
    sys.exit(main())
