"""Calibration's measurements: the kernels, copies and rates a GPU's hardware profile is
made of (:func:`measure`; ``hardware.calibrate`` runs it once per GPU and torch version).

Each rate is timed on real kernels of fixed shapes, back to back between two events (as
kernels run in a step): the copy bandwidths one way and both ways at once, matmuls over
a mix of shapes (:data:`MATMUL_SHAPES`), float32 matmuls, an elementwise kernel's memory
bandwidth, fused attention with a causal mask and given one as a tensor, convolutions
over ResNet-50's shapes (:data:`CONV_SHAPES`), and how much slower memory-bound
kernels run beside copies.
"""

from __future__ import annotations

import logging
import time

import torch

from .hardware import HardwareProfile, time_ms

log = logging.getLogger(__name__)


#: ``(m, k, n)`` of the bf16 matmuls whose total FLOPs over total time is the calibrated
#: matmul rate: a cube, and a transformer block's projections and weight gradient at
#: 16384 tokens (on an H100 the cube alone ran 3.5% faster than the example GPT's
#: matmuls did on average).
MATMUL_SHAPES = ((4096, 4096, 4096), (16384, 2048, 8192), (16384, 8192, 2048), (2048, 16384, 8192))


def _matmul_tflops(device: torch.device) -> float:
    flops = ms = 0.0
    for m, k, n in MATMUL_SHAPES:
        a = torch.randn(m, k, device=device, dtype=torch.bfloat16)
        b = torch.randn(k, n, device=device, dtype=torch.bfloat16)
        ms += per_call_ms(lambda: a @ b, 5)
        flops += 2 * m * k * n
    return flops / (ms / 1e3) / 1e12


def per_call_ms(fn, calls: int) -> float:
    """Milliseconds per call of ``fn`` run ``calls`` times back to back between two
    events, so that the host's launch latency overlaps the kernels (as in a step)."""
    return time_ms(lambda: [fn() for _ in range(calls)]) / calls


def _forward_backward_ms(fn, inputs) -> tuple[float, float]:
    """Milliseconds per call of ``fn`` (inputs requiring gradients in, one tensor out)
    and of its backward to ``inputs``: timed with the forward, less the forward."""
    forward = per_call_ms(fn, 10)
    with torch.enable_grad():
        grad = torch.randn_like(fn())
        both = per_call_ms(lambda: torch.autograd.grad(fn(), inputs, grad), 5)
    return forward, max(both - forward, 1e-3)


def _attention_ms(device: torch.device, dtype: torch.dtype, masked: bool = False) -> tuple[float, float, int]:
    """``(forward ms, backward ms, forward FLOPs)`` of a causal scaled-dot-product
    attention (batch 2, 16 heads, 4096 tokens, head size 128) as SDPA dispatches it.
    FLOPs count the kept half of the scores (``costs.node_flops`` counts the same way);
    the backward does 2.5 times the forward's. ``masked``: the causal mask given as a
    boolean ``attn_mask`` instead of ``is_causal`` (as Hugging Face models pass it), and
    FLOPs counting every score, as ``costs.node_flops`` counts attention given a mask.

    Only the fused kernels are allowed, whatever ``sdpa_kernel`` context the caller
    compiles in: the profile is cached per device, and attention that runs as the math
    backend is not a fused node in the graph (it is costed as its matmuls)."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from .costs import causal_fraction

    fused = [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]
    shape = (2, 16, 4096, 128)
    b, h, t, e = shape
    q, k, v = (torch.randn(shape, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
    mask = torch.ones(t, t, device=device, dtype=torch.bool).tril() if masked else None

    def attention():
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=not masked)

    with sdpa_kernel(fused):
        fw_ms, bw_ms = _forward_backward_ms(attention, (q, k, v))
    return fw_ms, bw_ms, int(4 * b * h * t * t * e * (1.0 if masked else causal_fraction(t, t)))


def _attention_tflops(device: torch.device, masked: bool, instead: str) -> tuple[float, float] | None:
    """Forward and backward TFLOP/s of :func:`_attention_ms`'s attention in bfloat16;
    ``None`` where no fused kernel runs it (logged, saying ``instead`` is used)."""
    try:
        fw_ms, bw_ms, flops = _attention_ms(device, torch.bfloat16, masked=masked)
    except RuntimeError as err:
        log.info("offload: could not time attention%s on %s (%s); using %s",
                 " given a mask" if masked else "", device, err, instead)
        return None
    return flops / fw_ms / 1e9, 2.5 * flops / bw_ms / 1e9


#: ``(batch, in channels, height and width, out channels, kernel size)`` of the bf16
#: convolutions (stride 1, padded to keep the size) whose total FLOPs over total time are
#: the calibrated convolution rates: ResNet-50's at batch 128, its 3x3 convolutions at
#: three widths and a 1x1 expansion of its last stage. Each does at least about 300 FLOPs
#: per byte it reads and writes, so it runs at the compute rate: the cost model takes
#: the larger of a kernel's compute and memory time, and a memory-bound shape (a 1x1
#: reduction from 256 to 64 channels: about 50 FLOPs per byte) would put its memory time
#: into the compute rate as well.
CONV_SHAPES = ((128, 64, 56, 64, 3), (128, 128, 28, 128, 3), (128, 256, 14, 256, 3), (128, 512, 7, 2048, 1))


def _conv_tflops(device: torch.device) -> tuple[float, float] | None:
    """Forward and backward TFLOP/s of :data:`CONV_SHAPES` in bfloat16, channels-last
    (the backward computes both gradients, twice the forward's FLOPs); ``None`` where
    they cannot run (logged: the matmul rate is used)."""
    import torch.nn.functional as F

    flops = fw_ms = bw_ms = 0.0
    try:
        for n, cin, size, cout, k in CONV_SHAPES:
            x, w = (torch.randn(shape, device=device, dtype=torch.bfloat16)
                    .contiguous(memory_format=torch.channels_last).requires_grad_()
                    for shape in ((n, cin, size, size), (cout, cin, k, k)))

            forward, backward = _forward_backward_ms(lambda: F.conv2d(x, w, padding=k // 2), (x, w))
            flops += 2 * n * cout * size * size * cin * k * k
            fw_ms, bw_ms = fw_ms + forward, bw_ms + backward
    except RuntimeError as err:
        log.info("offload: could not time convolutions on %s (%s); using the matmul rate", device, err)
        return None
    return flops / fw_ms / 1e9, 2 * flops / bw_ms / 1e9


def measure(device: torch.device) -> HardwareProfile:
    t0 = time.perf_counter()
    with torch.cuda.device(device):
        nbytes = 256 << 20
        host_a = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        host_b = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        dev_a = torch.empty(nbytes, dtype=torch.uint8, device=device)
        dev_b = torch.empty(nbytes, dtype=torch.uint8, device=device)
        side = torch.cuda.Stream(device)
        d2h_ms = time_ms(lambda: host_a.copy_(dev_a, non_blocking=True))
        h2d_ms = time_ms(lambda: dev_b.copy_(host_b, non_blocking=True))

        def both() -> None:
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                host_a.copy_(dev_a, non_blocking=True)
            dev_b.copy_(host_b, non_blocking=True)
            torch.cuda.current_stream().wait_stream(side)

        duplex_ms = time_ms(both)
        # Memory bandwidth as an elementwise kernel reaches it (two reads, one write),
        # the way fused Inductor kernels use it (on an H100, Inductor's GELU, add and
        # layer-norm kernels ran within 12% of it: benchmarks/kernel_rates.py).
        x, y, z = (t.view(torch.bfloat16) for t in (dev_a, dev_b, torch.empty_like(dev_a)))
        n = 4096
        a16 = torch.randn(n, n, device=device, dtype=torch.bfloat16)
        a32 = torch.randn(n, n, device=device)
        # The GPU idles while a graph compiles, and its clocks drop: about 0.2 s of
        # matmuls first, so that the rates below are those of a running step.
        for _ in range(1000):
            a16 @ a16
        torch.cuda.synchronize()
        add_ms = per_call_ms(lambda: torch.add(x, y, out=z), 10)
        matmul_tflops = _matmul_tflops(device)
        mm32_ms = per_call_ms(lambda: a32 @ a32, 3)
        # No fused attention kernel here: cost it as matmuls; none that takes a mask: as causal attention.
        causal = _attention_tflops(device, masked=False, instead="the matmul rate") or (matmul_tflops,) * 2
        masked = _attention_tflops(device, masked=True, instead="the causal rates") or (0.0, 0.0)
        conv = _conv_tflops(device) or (0.0, 0.0)
        # Thirty elementwise adds over 64 MiB buffers of their own (about 2 ms on an H100).
        u, v, w = (torch.empty(64 << 20, dtype=torch.uint8, device=device).view(torch.bfloat16)
                   for _ in range(3))
        slowdown = _copy_slowdown(lambda: [torch.add(u, v, out=w) for _ in range(30)],
                                  host_a, dev_a, host_b, dev_b)
    gb = nbytes / 1e9
    profile = HardwareProfile(
        d2h_gbps=gb / (d2h_ms / 1e3),
        h2d_gbps=gb / (h2d_ms / 1e3),
        duplex_gbps=2 * gb / (duplex_ms / 1e3),
        matmul_tflops=matmul_tflops,
        matmul_fp32_tflops=2 * n**3 / (mm32_ms / 1e3) / 1e12,
        memory_gbps=3 * gb / (add_ms / 1e3),
        attention_tflops=causal[0],
        attention_backward_tflops=causal[1],
        attention_masked_tflops=masked[0],
        attention_masked_backward_tflops=masked[1],
        conv_tflops=conv[0],
        conv_backward_tflops=conv[1],
        copy_slowdown=slowdown,
        name=torch.cuda.get_device_name(device),
    )
    log.info("offload: calibrated %s in %.1f s: %s", profile.name, time.perf_counter() - t0, profile)
    return profile


def time_beside_copies(fn, d2h: tuple[torch.Tensor, torch.Tensor] | None = None,
                       h2d: tuple[torch.Tensor, torch.Tensor] | None = None,
                       copies: int = 1, runs: int = 8) -> float:
    """Median milliseconds of ``fn`` on the current stream while ``copies`` copies per
    given direction run on side streams: ``d2h=(host, device)`` copies device to host,
    ``h2d=(device, host)`` host to device (neither: ``fn`` alone). The copies must
    outlast ``fn``. Of ``runs`` runs the first warms up."""
    current = torch.cuda.current_stream()
    lanes = [(torch.cuda.Stream(), *pair) for pair in (d2h, h2d) if pair is not None]
    times = []
    for _ in range(runs):
        torch.cuda.synchronize()
        for stream, dst, src in lanes:
            with torch.cuda.stream(stream):
                for _ in range(copies):
                    dst.copy_(src, non_blocking=True)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(current)
        fn()
        end.record(current)
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    rest = sorted(times[1:])
    return rest[len(rest) // 2]


def _copy_slowdown(compute, host_a, dev_a, host_b, dev_b) -> float:
    """Fraction by which ``compute`` slows while a D2H and an H2D copy run beside it (the
    copies, 256 MiB each way, outlast it); median of seven, clamped to [0, 0.5]."""
    alone = time_beside_copies(compute)
    beside = time_beside_copies(compute, d2h=(host_a, dev_a), h2d=(dev_b, host_b))
    return min(0.5, max(0.0, beside / alone - 1))
