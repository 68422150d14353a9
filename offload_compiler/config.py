"""User-facing configuration of the ``offload`` backend.

``OffloadConfig`` is built from the ``options=`` dict of ``torch.compile`` (see
:meth:`OffloadConfig.from_options`) or directly. Every field is validated in
``__post_init__``; a bad value raises ``ValueError`` naming the valid values.

Units: ``*_bytes`` take a byte count or bytes with a unit (``"16MiB"``); ``memory_budget`` and
``memory_limit`` take bytes only with a unit (a :class:`ByteSize`), so no number is read as bytes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import numbers
import os
import re
from dataclasses import dataclass
from typing import Any, Literal, Mapping, get_args

import torch

from .nbytes import SIZE_RE, UNITS_TEXT, ByteSize, parse_nbytes, with_unit

__all__ = ["DEFAULT_DEVICES", "SUPPORTED_DEVICE_TYPES", "ByteSize", "OffloadConfig", "budget_from_text",
           "check_budget", "is_integral", "is_real", "option_names", "parse_nbytes", "real_in_range",
           "valid_keys_text"]

InnerCompiler = Literal["inductor", "eager"]
Policy = Literal["cost_model", "all", "none"]
NodeCosts = Literal["estimate", "profile"]

#: Device types whose tensors the runtime knows how to offload. ``cuda`` uses side
#: streams, events and pinned host memory; ``cpu`` is the loopback mode: copies go to
#: separate host buffers synchronously, so the whole rewrite runs on a CPU-only machine.
SUPPORTED_DEVICE_TYPES = ("cuda", "cpu")

#: The default ``devices``: the accelerators this runtime drives.
DEFAULT_DEVICES = ("cuda",)


def _choices(literal: Any) -> tuple[str, ...]:
    return tuple(get_args(literal))


@dataclass(frozen=True)
class OffloadConfig:
    """Options of the ``offload`` backend (``torch.compile(..., options={...})``)."""

    inner_compiler: InnerCompiler = "inductor"
    """Compiler of the rewritten forward and backward graphs: ``"inductor"`` (default;
    Inductor's decompositions, fusion and caching are kept) or ``"eager"`` (plain
    AOTAutograd running the FX graphs; for debugging and bitwise tests)."""

    devices: tuple[str, ...] = DEFAULT_DEVICES
    """Device types whose activations may be offloaded. Default ``("cuda",)``.
    ``("cpu",)`` is the loopback mode used by tests on machines without a GPU: the
    graph rewrite is the same, copies go to separate host buffers. Entries may be
    given as ``"cuda:0"`` or ``torch.device("cuda", 0)``; they are stored as their
    type (``"cuda"``): the option names device *types*, and activations on every
    device of a named type may be offloaded."""

    min_offload_bytes: int = 1 << 20
    """Activations smaller than this (bytes, or a string with a unit: ``"16MiB"``) stay on the
    device: not copied (each copy costs the host tens of microseconds) nor, with
    ``policy="cost_model"``, recomputed. Default 1 MiB; ``0`` lets every eligible tensor move."""

    max_host_bytes: int | None = None
    """Cap on the host memory one compiled graph may plan to hold at once (bytes, or with a
    unit); activations past it stay on the device, with that reason in the log. ``None``
    (default): no cap beyond what pinning gets (a tensor that cannot be pinned stays put)."""

    policy: Policy = "cost_model"
    """How activations are chosen. ``"cost_model"`` (default): the planner decides
    keep, offload or recompute for each, from a cost model of copy bandwidth against
    recompute cost, to meet ``memory_budget`` at the least predicted step time.
    ``"all"``: offload every eligible activation (at least ``min_offload_bytes``).
    ``"none"``: change nothing (the inner compiler's own result: the baseline)."""

    memory_budget: float | str = "auto"
    """Bound on the *activation peak*: the most bytes of forward values held on the GPU
    for backward at any moment of the step (in backward, with the output of the op
    running: a recomputation that lands beside that output saves nothing, and the
    planner sees so). A float in (0, 1] is a fraction of the activation peak of the
    default partition with nothing offloaded (``1.0``: no change); a string with a unit
    is bytes (``"12GiB"``, ``"512MiB"``, ``"1.5GB"``; stored as a :class:`ByteSize`, an
    ``int`` of bytes that prints as written); ``"auto"`` (default) takes the least
    activation peak whose predicted overhead stays within ``max_overhead``. An ``int``
    is refused: ``1`` would read as one byte where ``1.0`` means no change. Used by
    ``policy="cost_model"``."""

    max_overhead: float = 0.03
    """With ``memory_budget="auto"``: the predicted step-time increase allowed, as a
    fraction of the step (default 0.03, three percent)."""

    copy_margin: float = 0.15
    """Slack the planner keeps on the copy engines: it plans every copy as if it ran at
    ``(1 - copy_margin)`` of the measured bandwidth, so a copy it counts as hidden still
    hides when the compute estimates are a little long, and reloads are issued a
    little early. A number in [0, 1); default 0.15 (measured: with 0 the copies that
    fill the forward to the last millisecond stalled compute by about 2 ms per step on
    the example GPT; see ``benchmarks/RESULTS.md``)."""

    node_costs: NodeCosts = "estimate"
    """Where node run times come from. ``"estimate"`` (default): FLOP formulas and a
    roofline over the hardware profile, no GPU work at compile time. ``"profile"``:
    each distinct matmul, attention or convolution of the graphs is run and timed on
    the device at compile time (random inputs of the real shapes, a few repetitions,
    the median), the rest is estimated; falls back to the estimate for a node it
    cannot run. CPU-only plans (loopback) always estimate."""

    hardware: Mapping[str, float] | None = None
    """Overrides of the measured hardware profile, e.g. ``{"d2h_gbps": 25.0}``; keys are
    the fields of ``offload_compiler.planning.hardware.HardwareProfile``. Stored as sorted
    ``(key, value)`` pairs so the config stays hashable; ``as_dict()`` gives a dict."""

    dump_dir: str | None = None
    """Folder to write, per compiled graph, the graphs after each pass, the plan (JSON
    and table), the config, a summary, a Chrome trace of the simulated schedule and a
    memory plot. ``None`` (default) reads ``$OFFLOAD_COMPILER_DUMP_DIR``; unset, nothing
    is written."""

    prefetch_depth: int = 1
    """How many reloads run ahead in backward: the reload of the k-th offloaded tensor
    (in order of first use in backward) is issued once the (k - depth)-th is consumed.
    ``0`` issues each reload right before its first use (no overlap)."""

    per_block: bool = False
    """The graph is one call of a chain: a model compiled one block at a time
    (``block.compile(backend="offload")`` for each block, as torchtitan does, or one
    compiled block called once per layer). Each backward then prefetches the reloads
    the next block's backward needs first, while it still runs, and releases left at
    the end of a forward are completed by the next block; the planner plans the graph
    as one of a chain of identical calls (``docs/design.md``, "Calls in a chain").
    ``False`` (default): each graph is planned and run on its own."""

    plan_cache: bool = True
    """Keep each plan in the plan cache (``$OFFLOAD_COMPILER_CACHE_DIR/plans``, default
    ``~/.cache/offload_compiler/plans``) and reuse it when the same graph is compiled again with
    the same options, hardware profile and code: in another process, or when Inductor's own cache
    skips our partitioner (the plan record, log line and dump then still appear). ``False`` (or
    ``OFFLOAD_COMPILER_PLAN_CACHE=0``) plans on every compile, past Inductor's own cache."""

    memory_limit: str | int | None = None
    """Bound on the *measured step peak* on the device: every byte allocated from the
    start of a compiled graph's forward to the end of its backward, with what was held
    before it (parameters, gradients, optimizer state). Bytes with a unit (``"40GiB"``,
    ``"35.5GB"``) or ``"device"``: what the GPU can give this process when the graph is
    compiled (free memory plus what PyTorch's allocator already holds), less
    5% for the allocator's fragmentation (``planning.limits.DEVICE_MARGIN``). The planner takes the fastest
    plan whose predicted step peak fits (with ``memory_budget="auto"``; a fixed
    ``memory_budget`` is also met), without running the graph unmodified first; after the
    first measured steps it plans again if the measured peak went over
    (``replan``). No plan fitting raises ``MemoryLimitError`` saying how much is missing.
    ``None`` (default): no limit. Counted on CUDA devices; on CPU (loopback) nothing held
    before the forward is counted."""

    replan: bool = True
    """Measure the compiled graph in its first training calls on the GPU (memory peak
    and what holds it, kernel and copy time, stalls), report predicted against measured,
    and plan again once, with the corrected inputs, where they differ by more than 5%
    (or the step went over ``memory_limit``): the graph is compiled a second time.
    ``False``: one compile, no measurement."""

    def __post_init__(self) -> None:
        if self.inner_compiler not in _choices(InnerCompiler):
            raise ValueError(
                f"inner_compiler={self.inner_compiler!r} is not valid; "
                f"choose one of {_choices(InnerCompiler)}"
            )
        if self.node_costs not in _choices(NodeCosts):
            raise ValueError(
                f"node_costs={self.node_costs!r} is not valid; choose one of {_choices(NodeCosts)}"
            )
        self._set("copy_margin", real_in_range(
            "copy_margin", self.copy_margin, 0.0, 1.0, hi_open=True,
            meaning="the fraction of copy bandwidth held back"))
        if self.policy not in _choices(Policy):
            raise ValueError(
                f"policy={self.policy!r} is not valid; choose one of {_choices(Policy)}"
            )
        self._set("devices", _device_types(self.devices))
        for name, none, units in (("min_offload_bytes", False, True), ("max_host_bytes", True, True),
                                  ("prefetch_depth", False, False)):
            self._set(name, _check_int(name, getattr(self, name), none, units=units))
        self._set("memory_budget", check_budget(self.memory_budget))
        self._set("memory_limit", _check_limit(self.memory_limit))
        if not isinstance(self.replan, bool):
            raise ValueError(f"replan={self.replan!r} is not valid; give True or False")
        if not isinstance(self.plan_cache, bool):
            raise ValueError(f"plan_cache={self.plan_cache!r} is not valid; give True or False")
        if not isinstance(self.per_block, bool):
            raise ValueError(f"per_block={self.per_block!r} is not valid; give True or False")
        if self.dump_dir is not None and not isinstance(self.dump_dir, (str, os.PathLike)):
            raise ValueError(f"dump_dir={self.dump_dir!r} is not valid; give a folder path or None")
        if self.dump_dir is not None:
            self._set("dump_dir", os.fspath(self.dump_dir))
        self._set("max_overhead", real_in_range(
            "max_overhead", self.max_overhead, 0.0, math.inf,
            meaning="a non-negative number: the allowed step-time increase, as a fraction of the step"))
        from .planning.hardware import validate_overrides

        hardware = validate_overrides(self.hardware)
        if hardware is not None:  # sorted pairs of floats, so the config stays hashable
            self._set("hardware", tuple(sorted(hardware.items())))

    def _set(self, name: str, value: Any) -> None:
        """Store a validated, normalised value in the frozen dataclass."""
        object.__setattr__(self, name, value)

    @classmethod
    def from_options(cls, options: Mapping[str, Any] | None) -> "OffloadConfig":
        """Build a config from ``torch.compile``'s ``options=`` dict."""
        if options is None:
            return cls()
        if isinstance(options, OffloadConfig):
            return options
        if not isinstance(options, Mapping):
            raise ValueError(
                f"options must be a dict, got {type(options).__name__}; {valid_keys_text()}"
            )
        unknown = sorted(k for k in options if k not in option_names())
        if unknown:
            raise ValueError(f"unknown option(s) {unknown}; {valid_keys_text()}")
        return cls(**dict(options))

    def replace(self, **changes: Any) -> "OffloadConfig":
        return dataclasses.replace(self, **changes)

    def fingerprint(self, exclude: tuple[str, ...] = ()) -> str:
        """A short stable hash of every option but ``exclude``; part of the partitioner's
        cache key (all options) and of the plan cache's (those that change a plan)."""
        text = repr(sorted((k, repr(v)) for k, v in self.as_dict().items() if k not in exclude))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def as_dict(self) -> dict[str, Any]:
        out = {name: getattr(self, name) for name in option_names()}
        if out["hardware"] is not None:  # stored as sorted pairs to stay hashable
            out["hardware"] = dict(out["hardware"])
        return out


def option_names() -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(OffloadConfig))


def valid_keys_text() -> str:
    return f"valid options are {list(option_names())}"


def is_real(value: Any) -> bool:
    """A real number (``numbers.Real``: Python, NumPy or other), not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def is_integral(value: Any) -> bool:
    """An integer (``numbers.Integral``: Python, NumPy or other), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _range_text(lo: float, hi: float, lo_open: bool, hi_open: bool) -> str:
    def end(x: float) -> str:
        return "inf" if math.isinf(x) else repr(x).removesuffix(".0")

    return f"{'(' if lo_open else '['}{end(lo)}, {end(hi)}{')' if hi_open or math.isinf(hi) else ']'}"


def real_in_range(
    name: str, value: Any, lo: float, hi: float, *, lo_open: bool = False,
    hi_open: bool = False, meaning: str = "",
) -> float:
    """``value`` as a Python ``float`` if it is a finite real number in the range, else a
    ``ValueError`` naming ``name``, the value and the range (``meaning`` says what it is).

    Any ``numbers.Real`` is accepted (``np.float32(0.5)`` as well as ``0.5``); bools,
    NaN and infinities are not.
    """
    ok = is_real(value)
    if ok:
        number = float(value)
        ok = (math.isfinite(number) and (number > lo if lo_open else number >= lo)
              and (number < hi if hi_open else number <= hi))
    if not ok:
        what = f" ({meaning})" if meaning else ""
        raise ValueError(
            f"{name}={value!r} is not valid; it must be a finite number in "
            f"{_range_text(lo, hi, lo_open, hi_open)}{what}"
        )
    return number


def _device_types(devices: Any) -> tuple[str, ...]:
    """``devices`` as a tuple of supported device types, each named once.

    Entries may be types (``"cuda"``), ``"type:index"`` strings or ``torch.device``
    objects; the index is dropped (the option names device types)."""
    given = devices
    if isinstance(devices, (str, torch.device)):
        devices = (devices,)
    if not isinstance(devices, (tuple, list)) or not devices:
        raise ValueError(
            f"devices={given!r} is not valid; give a non-empty tuple of "
            f"device types from {SUPPORTED_DEVICE_TYPES}"
        )
    types = []
    for d in devices:
        kind = None
        if isinstance(d, torch.device):
            kind = d.type
        elif isinstance(d, str):
            try:
                kind = torch.device(d).type
            except RuntimeError:
                kind = None
        if kind not in SUPPORTED_DEVICE_TYPES:
            raise ValueError(
                f"devices contains {d!r}, which is not valid; each entry must be a device "
                f"type from {SUPPORTED_DEVICE_TYPES}, a \"type:index\" string or a "
                "torch.device of one of those types"
            )
        if kind in types:
            raise ValueError(
                f"devices={tuple(devices)!r} names the device type {kind!r} twice; devices "
                "are types (every device of a named type may offload), so name each once"
            )
        types.append(kind)
    return tuple(types)


def _check_limit(value: Any) -> ByteSize | str | None:
    """``memory_limit`` normalised: ``None``, ``"device"`` or a :class:`ByteSize` (bytes
    with a unit, which keeps its text)."""
    if value is None or value == "device" or isinstance(value, ByteSize):
        return value
    if isinstance(value, str):
        try:
            size = ByteSize(value, name="memory_limit")
        except ValueError:
            size = None
        if size:
            return size
    raise ValueError(
        f"memory_limit={value!r} is not valid; give bytes with a unit as a string "
        f"({UNITS_TEXT}; e.g. \"40GiB\", \"35.5GB\"), \"device\" (what the GPU can give) or None")


def check_budget(value: Any) -> float | str:
    """``memory_budget`` normalised: ``"auto"``, a Python ``float`` fraction in (0, 1] (any
    real value that is not an integer type) or a :class:`ByteSize` (a string with a unit).
    Integers are refused whatever their type: they used to be bytes."""
    if isinstance(value, ByteSize) or (isinstance(value, str) and value == "auto"):
        return value
    if isinstance(value, str):
        match = SIZE_RE.fullmatch(value.lower())
        if match is not None and not match.group(2):
            raise ValueError(
                f"memory_budget={value!r} is not valid: a number as a string has no unit. Give "
                f"a float for a fraction of the activation peak (memory_budget=0.5), or bytes "
                f"with a unit ({UNITS_TEXT}), e.g. \"12GiB\""
            )
        try:
            return ByteSize(value, name="memory_budget")
        except ValueError:
            raise ValueError(
                f"memory_budget={value!r} is not valid; give \"auto\", a float fraction in "
                f"(0, 1] of the activation peak, or bytes with a unit ({UNITS_TEXT}) as a "
                "string, e.g. \"12GiB\""
            ) from None
    if is_integral(value):
        n = int(value)
        if n == 1:
            why = "1 could mean one byte or the whole peak"
            advice = ("for no change write 1.0 (a fraction: a float in (0, 1] of the activation "
                      "peak); for bytes write a string with a unit, e.g. memory_budget=\"1GiB\"")
        else:
            why = "a fraction is a float and bytes need a unit"
            advice = ("for a fraction of the activation peak write a float in (0, 1] (1.0 "
                      "changes nothing); for bytes write a string with a unit, e.g. "
                      f"memory_budget=\"{with_unit(max(n, 0))}\"")
        raise ValueError(f"memory_budget={value!r} is not valid: an int is refused, as {why}. "
                         f"{advice[0].upper()}{advice[1:]}")
    if is_real(value):
        number = float(value)
        if math.isfinite(number) and 0.0 < number <= 1.0:
            return number
    raise ValueError(
        f"memory_budget={value!r} is not valid; give \"auto\", a float fraction in "
        f"(0, 1] of the activation peak, or bytes with a unit ({UNITS_TEXT}) as a "
        "string, e.g. \"12GiB\""
    )


def budget_from_text(text: str) -> float | str:
    """A ``memory_budget`` written on a command line (``offload:B``, ``--memory-budget``):
    ``"auto"``, a fraction (``"0.5"``, ``"1.0"``) or bytes with a unit (``"12GiB"``),
    checked as :class:`OffloadConfig` checks it. A whole number without a unit (``"1"``,
    ``"3"``) is refused, as an ``int`` is in Python."""
    stripped = text.strip()
    if re.fullmatch(r"[+-]?\d+", stripped):
        return check_budget(int(stripped))  # refused, with what to write instead
    try:
        number = float(stripped)
    except ValueError:
        return check_budget(stripped)  # "auto", bytes with a unit, or refused
    return check_budget(number)


def _check_int(name: str, value: Any, allow_none: bool, *, units: bool = False) -> int | None:
    """``value`` as an ``int`` >= 0 (``numbers.Integral``, not a bool; ``units``: or bytes with a unit)."""
    if value is None and allow_none:
        return None
    if units and isinstance(value, str):
        return int(ByteSize(value, name=name))
    if not is_integral(value) or value < 0:
        allowed = " or ".join(["a non-negative integer"] + [f"bytes with a unit ({UNITS_TEXT})"] * units
                              + ["None"] * allow_none)
        raise ValueError(f"{name}={value!r} is not valid; it must be {allowed}")
    return int(value)

