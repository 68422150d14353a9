"""Measured kernel rates at the example GPT's shapes against the calibrated profile.

    python benchmarks/kernel_rates.py --preset h100 --out $OUT/rates.json

The planner's node costs are a roofline over the hardware profile, whose matmul rate
is calibrated on one 4096-cube bf16 matmul and whose memory bandwidth on a device
copy. This times, on the GPU, what the step really runs: the matmuls of one block at
the preset's shapes, and Inductor-compiled pointwise and layer-norm kernels of the
sizes recomputation produces (and eager adds, for the calibration). Each is run back to
back between two CUDA events, so that the host's launch overhead overlaps the
kernels as in a step. Each row gives the measured time, the roofline's estimate
from the calibrated profile, and their ratio; then the same kernel timed while a D2H
copy, an H2D copy, and both run beside it (the calibrated ``copy_slowdown`` is
measured on elementwise adds beside both), as slowdowns against the time alone.
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

from offload_compiler.models.gpt import PRESETS, preset  # noqa: E402
from offload_compiler.planning.hardware import calibrate, time_beside_copies, time_ms  # noqa: E402


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

    chunk = 256 << 20
    host = [torch.empty(chunk, dtype=torch.uint8, pin_memory=True) for _ in range(2)]
    device_bufs = [torch.empty(chunk, dtype=torch.uint8, device=dev) for _ in range(2)]

    def back_to_back(fn, n=50, d2h=False, h2d=False):
        """Milliseconds per call of ``fn`` run ``n`` times between two events: the host's
        launch overhead (tens of microseconds for a compiled function) overlaps the
        kernels, as it does in a step, instead of being timed with them. With ``d2h`` or
        ``h2d``, sixteen 256 MiB copies per direction (about 75 ms at 55 GB/s, longer
        than any batch below) run beside each timed batch."""
        if not (d2h or h2d):
            return time_ms(lambda: [fn() for _ in range(n)], repeat=5) / n
        return time_beside_copies(lambda: [fn() for _ in range(n)],
                                  d2h=(host[0], device_bufs[0]) if d2h else None,
                                  h2d=(device_bufs[1], host[1]) if h2d else None, copies=16) / n

    def timed(fn, n):
        """``(alone_ms, [slowdown beside D2H, beside H2D, beside both])`` per call."""
        alone = back_to_back(fn, n)
        return alone, [back_to_back(fn, n, d2h, h2d) / alone - 1
                       for d2h, h2d in ((True, False), (False, True), (True, True))]

    def mm(name, m, k, nn):
        a = torch.randn(m, k, device=dev, dtype=dt)
        b = torch.randn(k, nn, device=dev, dtype=dt)
        flop = 2 * m * k * nn
        ms, beside = timed(lambda: a @ b, n=max(1, min(10, int(20e-3 * hw.matmul_rate(dt) / flop))))
        est = max(flop / hw.matmul_rate(dt), (m * k + k * nn + m * nn) * 2 / (hw.memory_gbps * 1e9)) * 1e3
        rows.append((name, ms, est, flop / (ms / 1e3) / 1e12, "TFLOP/s", beside))

    mm("qkv projection", n, d, 3 * d)
    mm("attention output projection", n, d, d)
    mm("MLP up", n, d, 4 * d)
    mm("MLP down", n, 4 * d, d)
    mm("logits", n, d, cfg.vocab_size)

    heads, hd = cfg.n_heads, d // cfg.n_heads
    q, k, v = (torch.randn(cfg.batch_size, heads, cfg.seq_len, hd, device=dev, dtype=dt) for _ in range(3))
    flop = 4 * cfg.batch_size * heads * cfg.seq_len**2 * hd  # as the planner counts it (no causal halving)
    ms, beside = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), n=5)
    rows.append(("attention (causal SDPA)", ms, flop / hw.matmul_rate(dt) * 1e3,
                 flop / (ms / 1e3) / 1e12, "TFLOP/s", beside))

    def pointwise(name, fn, *shapes, compile=True):
        xs = [torch.randn(*s, device=dev, dtype=dt) for s in shapes]
        run = torch.compile(fn) if compile else fn
        out = run(*xs)
        nbytes = sum(x.numel() * x.element_size() for x in xs) + out.numel() * out.element_size()
        ms, beside = timed(lambda: run(*xs), n=50)
        rows.append((name, ms, nbytes / (hw.memory_gbps * 1e9) * 1e3, nbytes / (ms / 1e3) / 1e9, "GB/s", beside))

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
    table = [[name, f"{ms:.3f}", f"{est:.3f}", f"{ms / est:.2f}", f"{rate:.0f} {unit}",
              *(f"{100 * x:+.1f}%" for x in beside)]
             for name, ms, est, rate, unit, beside in rows]
    if args.out:
        Path(args.out).write_text(json.dumps({
            "gpu": torch.cuda.get_device_name(dev), "torch": torch.__version__, "preset": args.preset,
            "profile": hw.__dict__, "rows": [dict(zip(("kernel", "ms", "estimate_ms", "rate", "unit",
                                                               "slowdown_beside_d2h_h2d_both"), r))
                                             for r in rows]}, indent=1))
    print(tabulate(table, headers=["kernel", "measured ms", "roofline ms", "measured/roofline", "rate",
                                       "beside D2H", "beside H2D", "beside both"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
