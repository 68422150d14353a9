"""Session 24 (issue 19): what Inductor's lowering of the transfer ops costs in a cold
first step on the GPU, and whether the host-block prefill thread slows the compile.

    PYTHONPATH=$PWD python benchmarks/results/2026-11-24_s24_lowering_probe.py --model gpt --strategy offload:0.5 [--no-prefill]

A sampled profile of the example GPT's first step (session 24) put 0.71 s of the
forward's compile in Inductor's ``ir_node_to_tensor`` with transfer ops in the graph
against 0.05 s without. This wraps, for one first step (cold caches, plan cache off):
``ir_node_to_tensor`` (per thread, fake or real result, device: calls, seconds, bytes)
and ``ops.release_source`` (calls: each runs the real release, so a call made while
compiling would show). The ops' kernels and the pool's allocator are bound when their
modules load, so a wrapper set on the module afterwards never sees them; the first
version of this script wrapped them anyway and printed nothing for them.
``--no-prefill``: the pool pins no block ahead of the step.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="gpt")
    p.add_argument("--strategy", default="offload:0.5")
    p.add_argument("--no-prefill", action="store_true")
    p.add_argument("--device", default="cuda", help="cpu: a loopback check of this script")
    args = p.parse_args()
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="lowering-probe-")
    os.environ.pop("TRITON_CACHE_DIR", None)
    os.environ["OFFLOAD_COMPILER_PLAN_CACHE"] = "0"

    import torch
    import torch._inductor.ir as ir
    from zoo import MODELS

    from offload_compiler.compare.run import load_model
    from offload_compiler.runtime import ops, pool

    rows: dict = collections.defaultdict(lambda: [0, 0.0, 0])

    def count(key, seconds, nbytes=0):
        r = rows[key]
        r[0] += 1
        r[1] += seconds
        r[2] += nbytes

    def wrap(owner, name, key_fn):
        fn = getattr(owner, name)

        def timed(*a, **k):
            t = time.perf_counter()
            out = fn(*a, **k)
            count(key_fn(out), time.perf_counter() - t,
                  out.numel() * out.element_size() if isinstance(out, torch.Tensor) else 0)
            return out
        setattr(owner, name, timed)

    thread = lambda: "main" if threading.current_thread() is threading.main_thread() else threading.current_thread().name
    wrap(ir, "ir_node_to_tensor", lambda out: ("ir_node_to_tensor", thread(), type(out).__name__,
                                               getattr(getattr(out, "device", None), "type", None)))
    wrap(ops, "release_source", lambda out: ("ops.release_source", thread()))
    if args.no_prefill:
        pool.HostPool.prefill = lambda self, sizes, **k: 0

    model_spec = MODELS[args.model]
    model, batch, _ = load_model({"model": model_spec.factory})
    model = model.to(args.device, getattr(torch, model_spec.dtype))
    batch = [x.to(args.device) if isinstance(x, torch.Tensor) else x for x in batch]
    kind, _, budget = args.strategy.partition(":")
    if kind == "inductor":
        compiled = torch.compile(model)
    else:
        compiled = torch.compile(model, backend="offload",
                                 options={"memory_budget": budget if budget == "auto" else float(budget),
                                          **({"devices": ("cpu",)} if args.device == "cpu" else {})})
    if args.device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    compiled(*batch).backward()
    if args.device == "cuda":
        torch.cuda.synchronize()
    print(f"{args.model} {args.strategy}{' no prefill' if args.no_prefill else ''}: first step "
          f"{time.perf_counter() - t0:.1f} s (wrapped)")
    for key, (calls, seconds, nbytes) in sorted(rows.items(), key=lambda kv: -kv[1][1]):
        print(f"  {calls:5d} {seconds:7.3f} s {nbytes / 2**20:9.0f} MiB  {' '.join(map(str, key))}")


if __name__ == "__main__":
    main()
