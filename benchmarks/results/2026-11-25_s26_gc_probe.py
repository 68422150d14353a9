"""Session 26 probe (issue 19): what the offload partitioner's wall time holds besides
its own work: Python's garbage collections, and time the main thread was not running.

    python benchmarks/results/2026-11-25_s26_gc_probe.py [--gc-off] plan_cost.py ARGS...
    python benchmarks/results/2026-11-25_s26_gc_probe.py [--gc-off] [--no-scope] first_step.py ARGS...

Wraps ``OffloadPartitioner.__call__`` (and, for the Inductor rows of ``first_step.py``,
``min_cut_rematerialization_partition`` where Inductor calls it): per call, wall
seconds, the main thread's CPU seconds (``time.thread_time``) and the collections that
ran inside (``gc.callbacks``: count and seconds per generation), and the collector's
settings on entry; at exit, the collections of the whole process. ``--gc-off`` disables
the collector inside the wrapped call (restored after); ``--no-scope`` leaves out
``offload_compiler/gc_scope.py``'s tuning of the collector for the backend's compile. Then runs the benchmark script
named, with its arguments, and prints one line per wrapped call at exit.
"""

import atexit
import gc
import runpy
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

GC_OFF = "--gc-off" in sys.argv
NO_SCOPE = "--no-scope" in sys.argv
ARGS = [a for a in sys.argv[1:] if a not in ("--gc-off", "--no-scope")]
inside = [0]
gc_now: dict[int, list] = {}
gc_all: dict[int, list] = {}
gc_start = [0.0]
calls: list[str] = []


def on_gc(phase, info):
    if phase == "start":
        gc_start[0] = time.perf_counter()
        return
    took = time.perf_counter() - gc_start[0]
    for acc in (gc_now, gc_all) if inside[0] else (gc_all,):
        row = acc.setdefault(info["generation"], [0, 0.0])
        row[0] += 1
        row[1] += took


def _gcs(acc) -> str:
    return ", ".join(f"gen{g} {n}x {s:.3f} s" for g, (n, s) in sorted(acc.items())) or "none"


gc.callbacks.append(on_gc)


def wrap(owner, name, label):
    fn = getattr(owner, name)

    def timed(*args, **kwargs):
        gc_now.clear()
        calls.append(f"{label} entered: threshold {gc.get_threshold()}, frozen "
                     f"{gc.get_freeze_count()}, counts {gc.get_count()}")
        enabled = gc.isenabled()
        if GC_OFF:
            gc.disable()
        inside[0] += 1
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
            inside[0] -= 1
            if GC_OFF and enabled:
                gc.enable()
            gcs = _gcs(gc_now)
            calls.append(f"{label}: wall {wall:.3f} s, main-thread CPU {cpu:.3f} s, "
                         f"collections: {gcs}{' (collector off)' if GC_OFF else ''}")

    setattr(owner, name, timed)


import offload_compiler.partitioner as P  # noqa: E402

wrap(P.OffloadPartitioner, "__call__", "OffloadPartitioner")
if NO_SCOPE:  # the collector as Python has it, for the whole compile (gc_scope.py left out)
    import contextlib

    import offload_compiler.backend as B
    import offload_compiler.lowering as LW

    for module in (P, B, LW):
        module.fewer_collections = contextlib.nullcontext
if ARGS and ARGS[0].endswith("first_step.py"):
    import torch._functorch.partitioners as FP  # noqa: E402
    import torch._inductor.compile_fx as CF  # noqa: E402

    if getattr(CF, "min_cut_rematerialization_partition", None) is FP.min_cut_rematerialization_partition:
        wrap(CF, "min_cut_rematerialization_partition", "min-cut (Inductor)")
atexit.register(lambda: print("\n".join(
    ["== partitioner calls", *calls, f"whole process ({sys.version.split()[0]}): {_gcs(gc_all)}"]),
    flush=True))
sys.argv = [ARGS[0]] + ARGS[1:]
runpy.run_path(str(ROOT / "benchmarks" / ARGS[0]), run_name="__main__")
