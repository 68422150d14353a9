"""Hardware profile: copy bandwidths, matmul throughput and memory bandwidth per device.

GB = 1e9 bytes and TFLOP = 1e12 floating-point operations throughout the cost model.

- CUDA devices are calibrated by a short measurement (about a second) the first time a
  device name is seen; the result is cached on disk (``$OFFLOAD_COMPILER_CACHE_DIR`` or
  ``$XDG_CACHE_HOME/offload_compiler``, else ``~/.cache/offload_compiler``), one JSON file
  per device name and torch version.
- CPU-only runs use :data:`CPU_PROFILE`, a fixed profile, so planning is deterministic.
- ``OffloadConfig(hardware={...})`` overrides any field.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import torch

from .._version import SCHEMA_VERSION
from ..config import real_in_range

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HardwareProfile:
    d2h_gbps: float
    """Pinned device-to-host copy bandwidth, GB/s."""
    h2d_gbps: float
    """Pinned host-to-device copy bandwidth, GB/s."""
    duplex_gbps: float
    """Total bandwidth with both directions copying at once, GB/s."""
    matmul_tflops: float
    """Matmul throughput in the low-precision dtype (bf16/fp16), TFLOP/s: over a mix of
    shapes (:data:`MATMUL_SHAPES`)."""
    matmul_fp32_tflops: float
    """Matmul throughput in float32, TFLOP/s."""
    memory_gbps: float
    """Device memory bandwidth (bytes read plus written) that an elementwise kernel
    reaches, GB/s."""
    attention_tflops: float
    """Fused attention (scaled dot product) forward throughput in the low-precision
    dtype, TFLOP/s, counting only the scores a causal mask keeps."""
    attention_backward_tflops: float
    """The same for the attention backward kernel."""
    attention_masked_tflops: float = 0.0
    """Fused attention forward given an explicit mask (SDPA's ``attn_mask``, a kernel's
    ``attn_bias``), TFLOP/s counting every score: such a kernel cannot skip the masked
    ones, and runs slower per FLOP than causal attention. On an H100 (torch 2.11) HF
    Llama's cuDNN attention with its mask ran at 0.67x the causal forward rate and 0.62x
    the backward's (``benchmarks/RESULTS.md``, session 30); priced at the causal rates,
    it ran 1.5x to 1.6x longer than estimated, and that error set the fitted kernel
    scale of every other op. 0: not measured, the causal rate is used."""
    attention_masked_backward_tflops: float = 0.0
    """The same for the backward kernel of attention given a mask."""
    conv_tflops: float = 0.0
    """Convolution forward throughput in the low-precision dtype, TFLOP/s, over a mix of
    a bottleneck block's shapes in channels-last layout (:data:`CONV_SHAPES`). Priced at
    the matmul rate, convolutions were the kernels furthest from their estimate: on an
    H100 (torch 2.11) ResNet-50's forward kernels ran 1.46x their estimate and its
    backward's 2.18x (``benchmarks/RESULTS.md``, session 31). 0: not measured, the matmul
    rate is used."""
    conv_backward_tflops: float = 0.0
    """The same for the backward (the input's and the weight's gradients, counted as
    torch's flop counter counts ``convolution_backward``)."""
    launch_us: float = 4.0
    """Fixed cost of one kernel, microseconds."""
    copy_slowdown: float = 0.0
    """How much slower memory-bound kernels (elementwise ops, reductions: what Inductor
    generates) run while copies to and from the host run, as a fraction (0.02: two
    percent); in [0, 1). Measured on elementwise adds beside both copies. The planner
    does not slow matmuls and attention by it (see ``planner.Facts.slowed``)."""
    name: str = ""
    """Device name, or ``"cpu-fixed"``."""

    def matmul_rate(self, dtype: torch.dtype) -> float:
        """FLOP/s for a matmul in ``dtype``."""
        tflops = self.matmul_fp32_tflops if dtype in (torch.float32, torch.float64) else self.matmul_tflops
        return tflops * 1e12


#: Fixed profile used for CPU devices (tests, loopback): round numbers, deterministic.
CPU_PROFILE = HardwareProfile(
    d2h_gbps=10.0, h2d_gbps=10.0, duplex_gbps=16.0, matmul_tflops=0.5,
    matmul_fp32_tflops=0.25, memory_gbps=20.0, attention_tflops=0.5,
    attention_backward_tflops=0.5, launch_us=2.0, name="cpu-fixed",
)

FIELDS = tuple(f.name for f in dataclasses.fields(HardwareProfile) if f.name != "name")


#: Unit of each override, for messages.
_UNITS = {"launch_us": "microseconds", "copy_slowdown": "a fraction"}


def validate_overrides(overrides: Mapping[str, Any] | None) -> dict[str, float] | None:
    """The overrides as ``{field: float}``, or ``ValueError`` naming the bad key or value.

    Every key must be a profile field; every value a finite real number (any
    ``numbers.Real``, ``np.float32`` included, not a bool): positive, or in [0, 1) for
    ``copy_slowdown``. Values are returned as Python floats.
    """
    if overrides is None:
        return None
    if not isinstance(overrides, Mapping):
        raise ValueError(f"hardware={overrides!r} is not valid; give a dict with keys from {list(FIELDS)}")
    out = {}
    for key, value in overrides.items():
        if key not in FIELDS:
            raise ValueError(f"hardware has unknown key {key!r}; valid keys are {list(FIELDS)}")
        name = f"hardware[{key!r}]"
        if key == "copy_slowdown":
            out[key] = real_in_range(name, value, 0.0, 1.0, hi_open=True,
                                     meaning="a fraction: how much slower kernels run beside copies")
        else:
            unit = _UNITS.get(key) or ("GB/s" if key.endswith("_gbps") else "TFLOP/s")
            out[key] = real_in_range(name, value, 0.0, math.inf, lo_open=True,
                                     meaning=f"a positive number, in {unit}")
    return out


def _cache_dir() -> Path:
    from .cache import cache_dir

    return cache_dir()


#: A calibrated profile's file in the cache folder: ``hardware-<GPU, torch, version>.json``.
_PROFILE_FILE = "hardware-{}.json"


def copy_profiles(source: Path, folder: Path) -> None:
    """Copy the calibrated profiles in ``source`` that ``folder`` lacks into it: a fresh
    cache folder then holds no plans but calibrates no GPU again."""
    folder.mkdir(parents=True, exist_ok=True)
    for profile in source.glob(_PROFILE_FILE.format("*")):
        if not (folder / profile.name).exists():
            shutil.copyfile(profile, folder / profile.name)


_memo: dict[str, HardwareProfile] = {}
#: Bumped when calibration measures differently, so profiles cached before are remeasured.
PROFILE_VERSION = 6


def causal_fraction(q_len: int, k_len: int) -> float:
    """Fraction of the ``q_len`` x ``k_len`` scores a causal mask keeps (SDPA's
    ``is_causal``: query ``i`` sees keys ``0..i``)."""
    if q_len <= 0 or k_len <= 0:
        return 1.0
    m = min(q_len, k_len)
    kept = m * (m + 1) // 2 + (q_len - m) * k_len
    return kept / (q_len * k_len)


def profile_for(device: torch.device | str, overrides: Mapping[str, Any] | None = None) -> HardwareProfile:
    """The profile of ``device``'s type and name, with ``overrides`` applied."""
    device = torch.device(device)
    if device.type == "cuda":
        base = _cuda_profile(device)
    else:
        base = CPU_PROFILE
    if overrides:
        base = dataclasses.replace(base, **validate_overrides(overrides))
    return base


def _cuda_profile(device: torch.device) -> HardwareProfile:
    name = torch.cuda.get_device_name(device)
    if name in _memo:
        return _memo[name]
    slug = re.sub(r"[^A-Za-z0-9]+", "-", f"{name}-torch{torch.__version__}-v{PROFILE_VERSION}").strip("-")
    path = _cache_dir() / _PROFILE_FILE.format(slug)
    profile = None
    if path.exists():
        try:
            fields = json.loads(path.read_text())
            fields.pop("schema_version", None)
            profile = HardwareProfile(**fields)
        except (TypeError, ValueError, AttributeError):
            profile = None
    if profile is None:
        logging.getLogger("offload_compiler.progress").info("offload: calibrating %s (copies, matmuls, attention; once per GPU and torch "
                 "version, cached in %s)", name, path)
        profile = calibrate(device)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"schema_version": SCHEMA_VERSION,
                                        **dataclasses.asdict(profile)}, indent=2))
        except OSError as err:  # read-only home: keep it in memory
            log.debug("could not cache the hardware profile at %s: %s", path, err)
    _memo[name] = profile
    return profile


def time_ms(fn, repeat: int = 5) -> float:
    """Median milliseconds of ``fn`` on the current CUDA stream, after one warm-up run."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def calibrate(device: torch.device) -> HardwareProfile:
    """Measure copy bandwidths, matmul, attention, convolution and memory rates (a few seconds).

    Runs real kernels even when called during compilation, where a fake tensor mode is
    active (the planner runs inside AOTAutograd's partitioner).
    """
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily(), torch.no_grad():
        profile = _measure(device)
    if not _plausible(profile):
        log.warning("offload: calibration of %s gave implausible figures (%s); using the "
                    "H100 figures of docs/design.md instead", profile.name, profile)
        profile = dataclasses.replace(H100_PROFILE, name=profile.name)
    return profile


#: Fallback for a calibration that fails: H100 PCIe Gen5 figures of docs/design.md
#: (attention: benchmarks/RESULTS.md, session 4).
H100_PROFILE = HardwareProfile(
    d2h_gbps=55.0, h2d_gbps=55.0, duplex_gbps=95.0, matmul_tflops=774.0,
    matmul_fp32_tflops=400.0, memory_gbps=3000.0, attention_tflops=570.0,
    attention_backward_tflops=450.0, name="h100-design",
)


def _plausible(p: HardwareProfile) -> bool:
    return (1 <= p.d2h_gbps <= 500 and 1 <= p.h2d_gbps <= 500 and 1 <= p.duplex_gbps <= 1000
            and 0.1 <= p.matmul_tflops <= 20000 and 10 <= p.memory_gbps <= 100000
            and 0.1 <= p.attention_tflops <= 20000 and 0.1 <= p.attention_backward_tflops <= 20000
            and all(r == 0 or 0.1 <= r <= 20000
                    for r in (p.attention_masked_tflops, p.attention_masked_backward_tflops,
                              p.conv_tflops, p.conv_backward_tflops)))


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
        ms += _per_call_ms(lambda: a @ b, 5)
        flops += 2 * m * k * n
    return flops / (ms / 1e3) / 1e12


def _per_call_ms(fn, calls: int) -> float:
    """Milliseconds per call of ``fn`` run ``calls`` times back to back between two
    events, so that the host's launch latency overlaps the kernels (as in a step)."""
    return time_ms(lambda: [fn() for _ in range(calls)]) / calls


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
        fw_ms = _per_call_ms(attention, 10)
        with torch.enable_grad():
            grad = torch.randn(shape, device=device, dtype=dtype)
            both_ms = _per_call_ms(lambda: torch.autograd.grad(attention(), (q, k, v), grad), 5)
    flops = int(4 * b * h * t * t * e * (1.0 if masked else causal_fraction(t, t)))
    return fw_ms, max(both_ms - fw_ms, 1e-3), flops


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
#: the calibrated convolution rates: a ResNet bottleneck's at batch 128, its 1x1
#: reductions and expansions and 3x3 convolutions at two widths.
CONV_SHAPES = ((128, 256, 56, 64, 1), (128, 64, 56, 64, 3), (128, 128, 28, 128, 3), (128, 256, 14, 1024, 1))


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

            def conv(x=x, w=w, k=k):
                return F.conv2d(x, w, padding=k // 2)

            forward = _per_call_ms(conv, 10)
            with torch.enable_grad():
                grad = torch.randn_like(conv())
                both = _per_call_ms(lambda: torch.autograd.grad(conv(), (x, w), grad), 5)
            flops += 2 * n * cout * size * size * cin * k * k
            fw_ms, bw_ms = fw_ms + forward, bw_ms + max(both - forward, 1e-3)
    except RuntimeError as err:
        log.info("offload: could not time convolutions on %s (%s); using the matmul rate", device, err)
        return None
    return flops / fw_ms / 1e9, 2 * flops / bw_ms / 1e9


def _measure(device: torch.device) -> HardwareProfile:
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
        add_ms = _per_call_ms(lambda: torch.add(x, y, out=z), 10)
        matmul_tflops = _matmul_tflops(device)
        mm32_ms = _per_call_ms(lambda: a32 @ a32, 3)
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
