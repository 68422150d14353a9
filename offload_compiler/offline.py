"""Planning without running the model: fake tensors, and a compile that stops at the plan.

:func:`trace_and_plan` swaps the model's parameters and buffers for fake tensors (shapes,
dtypes and devices, no data), fakes the inputs the same way, and compiles with a backend
that plans each graph exactly as the ``offload`` backend does (Dynamo, AOTAutograd,
Inductor's decompositions and joint-graph passes, min-cut, the planner, the rewrite) but
generates no kernels: the planned forward runs as an FX graph on fake tensors, so nothing
is computed and no weight is read. The model's own tensors are put back on exit.

Planning for a device this machine lacks (``device="cuda"`` on a CPU) is done in loopback:
the fake tensors are CPU tensors, ``devices=("cpu",)``, and the hardware profile is a
named one (:data:`PROFILES`) or a JSON file. The graph then differs from the GPU's in one
op: attention is the CPU flash kernel, costed with the CUDA kernel's FLOP formula.

This module holds the mechanics; :func:`offload_compiler.explain` and
:func:`offload_compiler.plan_offline` are the public faces.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import torch
import torch.fx as fx
from torch.utils import _pytree as pytree

from .backend import OffloadBackend
from .config import OffloadConfig
from .planning.hardware import FIELDS, HardwareProfile, validate_overrides
from .reporting.records import GraphPlan

#: Hardware profiles by name, for planning on a machine without that GPU.
PROFILES: dict[str, dict[str, float]] = {
    # Measured on an NVIDIA H100 80GB HBM3 (benchmarks/results/2026-11-21_s4_kernel_rates_h100.json:
    # copies, matmuls and memory as calibrated; attention forward from its causal SDPA row,
    # backward from the profile of the example GPT in the same session; copy_slowdown from
    # its eager 256 MiB add beside both copies; attention given a mask from HF Llama's cuDNN
    # attention with its mask, 1.568 and 5.068 ms a call for 549.8 GFLOP forward, torch 2.11:
    # benchmarks/results/2026-11-27_s30_cmd3_profile_h100.log).
    "h100": {"d2h_gbps": 55.1, "h2d_gbps": 55.3, "duplex_gbps": 100.7, "matmul_tflops": 721.0,
             "matmul_fp32_tflops": 51.5, "memory_gbps": 2969.0, "attention_tflops": 570.0,
             "attention_backward_tflops": 454.0, "attention_masked_tflops": 350.6,
             "attention_masked_backward_tflops": 271.2, "launch_us": 4.0, "copy_slowdown": 0.037},
}
#: The fields a profile must give (the others have defaults).
REQUIRED = tuple(f.name for f in dataclasses.fields(HardwareProfile)
                 if f.name in FIELDS and f.default is dataclasses.MISSING)
DEVICES = ("cpu", "cuda")


def load_profile(profile: str | Path | Mapping[str, Any]) -> dict[str, float]:
    """A full hardware profile: a name of :data:`PROFILES`, a JSON file of
    ``HardwareProfile`` fields (a calibrated ``~/.cache/offload_compiler/hardware-*.json``
    reads as one), or a dict. ``ValueError`` naming what is wrong."""
    if isinstance(profile, Mapping):
        fields, where = dict(profile), "the profile"
    elif isinstance(profile, str) and profile in PROFILES:
        return dict(PROFILES[profile])
    else:
        path = Path(profile)
        if not path.is_file():
            raise ValueError(f"profile {str(profile)!r} is neither a named profile {sorted(PROFILES)} "
                             "nor a JSON file")
        try:
            fields = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise ValueError(f"profile file {path} cannot be read as JSON: {error}") from None
        if not isinstance(fields, dict):
            raise ValueError(f"profile file {path} holds {type(fields).__name__}; give an object "
                             f"with keys from {list(FIELDS)}")
        where = f"profile file {path}"
    fields.pop("name", None)  # a calibrated profile names its GPU
    missing = [k for k in REQUIRED if k not in fields]
    if missing:
        raise ValueError(f"{where} lacks {missing}; a profile gives every one of {list(REQUIRED)} "
                         f"(and may give {[k for k in FIELDS if k not in REQUIRED]})")
    return validate_overrides(fields) or {}


def resolve_device(device: str | torch.device) -> tuple[torch.device, bool]:
    """``(device the fake tensors go on, loopback)``: a ``cuda`` device on a machine
    without CUDA is planned in loopback, on the CPU."""
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"device={device!r} is not valid; valid devices are {list(DEVICES)}") from None
    if device.type not in DEVICES:
        raise ValueError(f"device={str(device)!r} is not valid; valid devices are {list(DEVICES)}")
    if device.type == "cuda" and not torch.cuda.is_available():
        return torch.device("cpu"), True
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device, False


def trace_and_plan(model: torch.nn.Module, args: Sequence[Any], kwargs: Mapping[str, Any],
                   config: OffloadConfig, device: torch.device | None = None) -> list[GraphPlan]:
    """Plan ``model(*args, **kwargs)`` under fake tensors, one plan per graph that needs a
    backward. ``device``: where the fake tensors go (``None``: each on its own device;
    a model on the meta device needs one)."""
    from torch._subclasses.fake_tensor import DataDependentOutputException, DynamicOutputShapeException

    mode = _fake_mode()
    backend = _PlanOnly(config)
    with _faked_model(model, mode, device) as fake:
        fake_args, fake_kwargs = pytree.tree_map_only(torch.Tensor, fake, (tuple(args), dict(kwargs)))
        try:
            with mode, torch.enable_grad(), torch.random.fork_rng(devices=[]):
                torch.compile(model, backend=backend)(*fake_args, **fake_kwargs)
        except (DataDependentOutputException, DynamicOutputShapeException) as error:
            raise RuntimeError(
                f"the model's forward needs a tensor's values ({error}: .item(), 'if tensor:', "
                "nonzero, ...) outside a compiled graph; planning without running has only shapes. "
                "To see its plan, train a step with backend = offload_compiler.make_backend(...) "
                "and print each plan.summary() of backend.plans") from error
        except Exception as error:  # Dynamo wraps what the planner raised: the planner's own error
            limit = _memory_limit_error(error)
            if limit is None:
                raise
            raise limit from None
    return backend.plans


def _memory_limit_error(error: BaseException) -> BaseException | None:
    """The ``MemoryLimitError`` that ``error`` (as Dynamo raised it: ``BackendCompilerFailed``)
    wraps, if any."""
    from .planning.replan import MemoryLimitError

    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, MemoryLimitError):
            return error
        seen.add(id(error))
        error = getattr(error, "inner_exception", None) or error.__cause__ or error.__context__
    return None


def _fake_mode():
    from torch._subclasses.fake_tensor import FakeTensorMode

    # Static sizes, as a first compile sees them; a plain tensor attribute of the model (not
    # a parameter or buffer) is read as a constant.
    return FakeTensorMode(allow_non_fake_inputs=True)


@contextlib.contextmanager
def _faked_model(model: torch.nn.Module, mode: Any,
                 device: torch.device | None) -> Iterator[Callable[[torch.Tensor], torch.Tensor]]:
    """Swap every parameter and buffer of ``model`` for a fake one (tied tensors stay
    tied), yield the function that fakes a tensor, and put the model's own back on exit."""
    memo: dict[int, torch.Tensor] = {}

    def fake(t: torch.Tensor) -> torch.Tensor:
        if id(t) not in memo:
            memo[id(t)] = _fake_tensor(t, mode, device)
        return memo[id(t)]

    swapped: list[tuple[dict[str, Any], str, Any]] = []
    try:
        for module in model.modules():
            for table in (module._parameters, module._buffers):
                for name, t in list(table.items()):
                    if t is None:
                        continue
                    if id(t) not in memo and isinstance(t, torch.nn.Parameter):
                        memo[id(t)] = torch.nn.Parameter(_fake_tensor(t.detach(), mode, device),
                                                         requires_grad=t.requires_grad)
                    swapped.append((table, name, t))
                    table[name] = fake(t)
        yield fake
    finally:
        for table, name, t in reversed(swapped):
            table[name] = t


def _fake_tensor(t: torch.Tensor, mode: Any, device: torch.device | None) -> torch.Tensor:
    if device is None and not t.is_meta:
        return mode.from_tensor(t)
    if device is None:
        raise ValueError("the model or its inputs are on the meta device; give device='cpu' or "
                         "'cuda' to plan for one (plan_offline, or --device on the command line)")
    meta = t if t.is_meta else t.to("meta")
    return mode.fake_tensor_converter.from_meta_and_device(mode, meta, device)


def _run_fx(gm: fx.GraphModule, example_inputs: Sequence[Any], **_: Any) -> Callable[..., Any]:
    """Inductor's inner compile, replaced: the graph as it is, run by FX (on fake tensors)."""
    from functorch.compile import make_boxed_func

    return make_boxed_func(gm.forward)


class _PlanOnly(OffloadBackend):
    """The ``offload`` backend up to its plan and rewrite: with Inductor as the inner
    compiler, Inductor's decompositions, joint-graph passes and caches-off partition run
    (so the plan is the one a training compile makes), then no kernel is generated."""

    def _inner_compile(self, gm, example_inputs, config, partitioner, *rest, **options):
        if config.inner_compiler != "inductor":
            return super()._inner_compile(gm, example_inputs, config, partitioner, *rest, **options)
        from torch._inductor.compile_fx import compile_fx

        # Caches off: a cached artifact would skip the partitioner (and could not run on
        # fake tensors); the plan cache still serves a plan made before.
        return compile_fx(gm, example_inputs, inner_compile=_run_fx,
                          config_patches={"custom_partitioner_fn": partitioner,
                                          "force_disable_caches": True})
