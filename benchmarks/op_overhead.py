"""Host time per call of the transfer ops, as registered and as ``custom_op`` would.

    python benchmarks/op_overhead.py --out $OUT/op_overhead.json

The forward issues ``d2h`` and ``release`` for every offloaded tensor from Inductor's
Python wrapper; what they cost on the host decides whether the host keeps ahead of the
GPU at the start of forward. This times each op's call on the host (``perf_counter``
around the call; copies of a 1 MiB tensor, so the GPU never holds the host back),
through ``torch.ops.offload`` as the package registers them, and through the same
kernels registered with ``torch.library.custom_op`` (the registration before
this benchmark existed), and the bodies called directly. Needs a CUDA GPU; with
``--device cpu`` it times the loopback path.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from tabulate import tabulate

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from offload_compiler.runtime import ops  # noqa: E402


def _custom_op_versions():
    """The op kernels registered with ``torch.library.custom_op`` in a scratch namespace."""
    ns = "offload_bench_custom_op"

    @torch.library.custom_op(f"{ns}::d2h", mutates_args=())
    def d2h(src: torch.Tensor, keep_strides: bool) -> torch.Tensor:
        return ops.copy_to_host(src, keep_strides)

    d2h.register_fake(ops._d2h_fake)

    @torch.library.custom_op(f"{ns}::release", mutates_args=("host",))
    def release(src: torch.Tensor, host: torch.Tensor, anchor: torch.Tensor | None) -> None:
        ops.release_source(src, host)

    @torch.library.custom_op(f"{ns}::h2d", mutates_args=())
    def h2d(host: torch.Tensor, anchor: torch.Tensor | None, device: str,
            stride: list[int] | None) -> torch.Tensor:
        return ops.copy_to_device(host, anchor, device, stride)

    h2d.register_fake(ops._h2d_fake)

    @torch.library.custom_op(f"{ns}::wait", mutates_args=("x",))
    def wait(x: torch.Tensor) -> None:
        ops.wait_for_copy(x)

    return d2h, release, h2d, wait


def _time_round_trips(d2h, release, h2d, wait, x, device, n) -> dict[str, float]:
    """Median microseconds per call of each op over ``n`` round trips of ``x``."""
    spent = {"d2h": [], "release": [], "h2d": [], "wait": []}
    clock = time.perf_counter
    for i in range(n + 20):
        t0 = clock()
        host = d2h(x, True)
        t1 = clock()
        release(x, host, None)
        t2 = clock()
        back = h2d(host, None, device, None)
        t3 = clock()
        wait(back)
        t4 = clock()
        if i >= 20:  # first rounds fill the pool and create the streams
            for name, dt in zip(spent, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
                spent[name].append(dt * 1e6)
        if i % 50 == 49 and x.is_cuda:
            torch.cuda.synchronize()  # keep the launch queue short; not timed
    return {name: statistics.median(v) for name, v in spent.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--calls", type=int, default=500)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("op_overhead.py needs a CUDA GPU (or --device cpu)", file=sys.stderr)
        return 2
    device = str(torch.device(args.device))
    if device == "cuda":
        device = "cuda:0"
    x = torch.randn(512, 1024, dtype=torch.bfloat16, device=device)  # 1 MiB
    variants = {
        "torch.ops.offload (Library)": (ops.D2H, ops.RELEASE, ops.H2D, ops.WAIT),
        "custom_op, same kernels": _custom_op_versions(),
        "kernels called directly": (ops.copy_to_host, lambda s, h, a: ops.release_source(s, h),
                                    ops.copy_to_device, ops.wait_for_copy),
    }
    rows, record = [], {}
    with torch.no_grad():
        for name, fns in variants.items():
            got = _time_round_trips(*fns, x, device, args.calls)
            record[name] = got
            rows.append([name, *(f"{got[k]:.1f}" for k in ("d2h", "release", "h2d", "wait"))])
    if x.is_cuda:
        torch.cuda.synchronize()
    device_name = torch.cuda.get_device_name() if x.is_cuda else "cpu"
    print(f"host microseconds per call (median of {args.calls}), {device_name}, torch {torch.__version__}")
    print(tabulate(rows, headers=["registration", "d2h", "release", "h2d", "wait"]))
    if args.out:
        Path(args.out).write_text(json.dumps(
            {"device": device_name, "torch": torch.__version__, "calls": args.calls,
             "us_per_call": record}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
