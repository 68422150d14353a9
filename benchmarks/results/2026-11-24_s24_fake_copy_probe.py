"""Session 24 (issue 19): how long the transfer ops' fake implementations take on this
host, per call, with CUDA initialised, against the same calls on CPU fake tensors.

    PYTHONPATH=$PWD python benchmarks/results/2026-11-24_s24_fake_copy_probe.py

The session 23 profile of the example GPT's first step on an H100 host had
``offload::d2h``'s fake implementation at 4.3 ms a call (0.14 ms on a CPU-only host).
Prints, per source device and op, the first five calls and the median of 50 (ms).
"""

from __future__ import annotations

import statistics
import time

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from offload_compiler.runtime import ops


def _times(fn, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1e3)
    return out


def main() -> None:
    if torch.cuda.is_available():
        torch.empty(1, device="cuda")  # initialise CUDA, as a training process has
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    for dev in devices:
        with FakeTensorMode() as mode:
            x = torch.empty(4, 4096, 2048, dtype=torch.bfloat16, device=dev)
            host = ops.D2H(x, True)
            cases = {
                "d2h": lambda: ops.D2H(x, True),
                "h2d": lambda: ops.H2D(host, None, dev, None),
                "empty_strided cpu": lambda: torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="cpu"),
                "empty_strided same device": lambda: torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=dev),
                "mul": lambda: x * 2,
            }
            for name, fn in cases.items():
                t = _times(fn, 55)
                print(f"{dev:5s} {name:26s} first five {' '.join(f'{v:.3f}' for v in t[:5])}  "
                      f"median {statistics.median(t[5:]):.3f} ms")
        del mode


if __name__ == "__main__":
    main()
