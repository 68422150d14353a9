"""Measured kernel rates at the example GPT's shapes against the calibrated profile.

    python benchmarks/kernel_rates.py --preset h100 --out $OUT/rates.json

The planner's node costs are a roofline over the hardware profile, whose matmul rate
is calibrated on one 4096-cube bf16 matmul and whose memory bandwidth on a device
copy. This times, on the GPU, what the step really runs: the matmuls of one block at
the preset's shapes, and Inductor-compiled pointwise and layer-norm kernels of the
sizes recomputation produces (and eager adds, for the calibration). Each is run back to
back between two CUDA events, so that the host's launch overhead overlaps the
kernels as in a step. Each row gives the measured time, the roofline's estimate
from the calibrated profile, and their ratio.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from tabulate import tabulate

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

from gpt import PRESETS, preset  # noqa: E402
from offload_compiler.hardware import calibrate, time_ms  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="h100", choices=sorted(PRESETS))
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("kernel_rates.py needs a CUDA GPU", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    hw = calibrate(dev)
    cfg = preset(args.preset)
    n, d, dt = cfg.batch_size * cfg.seq_len, cfg.d_model, torch.bfloat16
    rows = []

    def back_to_back(fn, n=50):
        """Milliseconds per call of ``fn`` run ``n`` times between two events: the host's
        launch overhead (tens of microseconds for a compiled function) overlaps the
        kernels, as it does in a step, instead of being timed with them."""
        return time_ms(lambda: [fn() for _ in range(n)], repeat=5) / n

    def mm(name, m, k, nn):
        a = torch.randn(m, k, device=dev, dtype=dt)
        b = torch.randn(k, nn, device=dev, dtype=dt)
        ms = back_to_back(lambda: a @ b, n=10)
        est = max(2 * m * k * nn / hw.matmul_rate(dt), (m * k + k * nn + m * nn) * 2 / (hw.memory_gbps * 1e9)) * 1e3
        rows.append((name, ms, est, 2 * m * k * nn / (ms / 1e3) / 1e12, "TFLOP/s"))

    mm("qkv projection", n, d, 3 * d)
    mm("attention output projection", n, d, d)
    mm("MLP up", n, d, 4 * d)
    mm("MLP down", n, 4 * d, d)
    mm("logits", n, d, cfg.vocab_size)

    def pointwise(name, fn, *shapes, compile=True):
        xs = [torch.randn(*s, device=dev, dtype=dt) for s in shapes]
        run = torch.compile(fn) if compile else fn
        out = run(*xs)
        nbytes = sum(x.numel() * x.element_size() for x in xs) + out.numel() * out.element_size()
        ms = back_to_back(lambda: run(*xs))
        rows.append((name, ms, nbytes / (hw.memory_gbps * 1e9) * 1e3, nbytes / (ms / 1e3) / 1e9, "GB/s"))

    pointwise("GELU (recomputed MLP activation)", lambda x: F.gelu(x, approximate="tanh"), (n, 4 * d))
    pointwise("layer norm (recomputed block input)",
              lambda x: F.layer_norm(x, (d,)), (n, d))
    pointwise("residual add", lambda x, y: x + y, (n, d), (n, d))
    pointwise("GELU backward with recompute", lambda g, x: g * torch.ops.aten.gelu_backward(
        torch.ones_like(x), x, approximate="tanh"), (n, 4 * d), (n, 4 * d))
    pointwise("residual add, eager", torch.add, (n, d), (n, d), compile=False)
    pointwise("add of 256 MiB, eager (as calibrated)", torch.add, (n * 2, 4 * d), (n * 2, 4 * d), compile=False)
    pointwise("add of 256 MiB, compiled", lambda x, y: x + y, (n * 2, 4 * d), (n * 2, 4 * d))
    print(f"calibrated: {hw}")
    table = [[name, f"{ms:.3f}", f"{est:.3f}", f"{ms / est:.2f}", f"{rate:.0f} {unit}"]
             for name, ms, est, rate, unit in rows]
    if args.out:
        Path(args.out).write_text(json.dumps({
            "gpu": torch.cuda.get_device_name(dev), "torch": torch.__version__, "preset": args.preset,
            "profile": hw.__dict__, "rows": [dict(zip(("kernel", "ms", "estimate_ms", "rate", "unit"), r))
                                             for r in rows]}, indent=1))
    print(tabulate(table, headers=["kernel", "measured ms", "roofline ms", "measured/roofline", "rate"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
