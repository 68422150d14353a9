"""Hardware profile: copy bandwidths, matmul throughput and memory bandwidth per device.

GB = 1e9 bytes and TFLOP = 1e12 floating-point operations throughout the cost model.

- CUDA devices are calibrated by a short measurement (``calibration.py``, a few
  seconds) the first time a device name is seen; the result is cached on disk
  (``$OFFLOAD_COMPILER_CACHE_DIR`` or ``$XDG_CACHE_HOME/offload_compiler``, else
  ``~/.cache/offload_compiler``), one JSON file per device name and torch version.
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
    """Convolution forward throughput in the low-precision dtype, TFLOP/s, over
    ResNet-50's compute-bound shapes in channels-last layout (``calibration.CONV_SHAPES``).
    Priced at the matmul rate, ResNet-50's kernels gave the zoo's largest fitted scales:
    on an H100 (torch 2.11) its forward ran 1.46x its estimate and its backward 2.18x
    (``benchmarks/RESULTS.md``, session 31). 0: not measured, the matmul rate is used."""
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

    from .calibration import measure

    with unset_fake_temporarily(), torch.no_grad():
        profile = measure(device)
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
