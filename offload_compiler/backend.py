"""The ``offload`` backend for ``torch.compile``.

``torch.compile(model, backend="offload", options={...})`` calls :func:`offload_backend`
with Dynamo's FX graph; :func:`make_backend` builds the same from an
:class:`~offload_compiler.config.OffloadConfig` and keeps the plans it made.
"""

from __future__ import annotations

import inspect
import logging
import weakref
from typing import Any, Callable, Mapping, Sequence

import torch
import torch.fx as fx

from .config import SUPPORTED_DEVICE_TYPES, OffloadConfig
from .partitioner import OffloadPartitioner
from .planning import cache, limits, sizes
from .planning.replan import Corrections
from .replanning import MeasuredGraph
from .reporting.records import GraphPlan
from .runtime.pool import host_pool

log = logging.getLogger("offload_compiler")

VALID_MODES = (None, "default")


class OffloadBackend:
    """A ``torch.compile`` backend; ``plans`` lists what it decided, one per graph."""

    def __init__(self, config: OffloadConfig | None = None) -> None:
        self.config = config if config is not None else OffloadConfig()
        self.plans: list[GraphPlan] = []
        self._measured: weakref.WeakSet[MeasuredGraph] = weakref.WeakSet()

    @property
    def settled(self) -> bool:
        """Every compiled graph of this backend has been measured (and planned again where
        that was called for), or will not be: later steps run the final plans."""
        return all(g.done for g in self._measured)

    @property
    def current_plans(self) -> list[GraphPlan]:
        """``plans`` less those a re-plan replaced: the plans the graphs run now."""
        replaced = {p.replaces for p in self.plans if p.replaces is not None}
        return [p for p in self.plans if p.graph_id not in replaced]

    def __call__(
        self,
        gm: fx.GraphModule,
        example_inputs: Sequence[Any],
        *,
        options: Mapping[str, Any] | None = None,
        mode: str | None = None,
    ) -> Callable[..., Any]:
        if mode not in VALID_MODES:
            raise ValueError(
                f"mode={mode!r} is not supported by the offload backend; valid modes are "
                f"{VALID_MODES} (pass options=... instead)"
            )
        config = self.config if options is None else OffloadConfig.from_options(options)
        _warn_if_nothing_offloadable(gm, example_inputs, config)
        per_size = sizes.PlanPerSize.for_graph(
            gm, example_inputs, config.policy,
            lambda graph, inputs, values: self._compile(graph, inputs, config, values))
        if per_size is None:  # static sizes: one plan, as always
            return self._compile(gm, example_inputs, config)
        return per_size  # dynamic sizes: a plan per range of sizes (planning/sizes.py)

    def _compile(
        self,
        gm: fx.GraphModule,
        example_inputs: Sequence[Any],
        config: OffloadConfig,
        planned_at: Mapping[Any, int] | None = None,
    ) -> Callable[..., Any]:
        """The inner compiler's callable for ``gm``, planned at the hints or, for a graph
        with dynamic sizes, at ``planned_at`` (size symbol to value); for a static graph
        on a device the backend measures, wrapped to measure its first calls and plan
        again from the measurement (``replanning.py``)."""
        device = _offload_device(example_inputs, config)
        corrections = limits.initial(config, device)
        compiled, plan = self._compile_planned(gm, example_inputs, config, planned_at, corrections)
        if not config.replan or config.policy == "none" or device is None:
            return compiled

        def recompile(new: Corrections, args: list) -> tuple[Callable[..., Any], GraphPlan | None]:
            return self._compile_planned(gm, args, config, planned_at, new)

        replans = planned_at is None and config.policy == "cost_model"  # "all": measured only
        measured = MeasuredGraph(compiled, plan, device, corrections, recompile if replans else None)
        self._measured.add(measured)
        return measured

    def _compile_planned(self, gm, example_inputs, config: OffloadConfig, planned_at,
                         corrections: Corrections) -> tuple[Callable[..., Any], GraphPlan | None]:
        made = _Collect(self.plans)
        partitioner = OffloadPartitioner(
            config, on_plan=made, corrections=corrections,
            cache_key=cache.key_for(gm, example_inputs, config, planned_at, corrections))
        compiled = self._inner_compile(gm, example_inputs, config, sizes.at_sizes(partitioner, planned_at))
        if not partitioner.called and torch.is_grad_enabled():
            # No partition: Inductor's (or AOTAutograd's) cache held the graphs, or no
            # backward is needed (then the plan cache has no entry for this key either).
            partitioner.report_cached()
        return compiled, (made.plans[-1] if made.plans else None)


    @staticmethod
    def _inner_compile(gm, example_inputs, config: OffloadConfig, partitioner):
        if config.inner_compiler == "inductor":
            from torch._inductor.compile_fx import compile_fx

            from . import lowering

            lowering.install()

            return _uses_pool(config, compile_fx(
                gm, example_inputs, config_patches={"custom_partitioner_fn": partitioner}
            ), example_inputs)
        from functorch.compile import make_boxed_func
        from torch._dynamo.backends.common import aot_autograd

        def run_fx(graph: fx.GraphModule, _inputs: Sequence[Any]) -> Callable[..., Any]:
            return make_boxed_func(graph.forward)

        # As torch's own aot_eager: buffers the step mutates (BatchNorm's running
        # statistics) are updated inside the forward graph, not after it, so a value
        # saved for backward is never a buffer written over before backward reads it.
        return _uses_pool(config, aot_autograd(
            fw_compiler=run_fx, bw_compiler=run_fx, partition_fn=partitioner,
            keep_inference_input_mutations=True,
        )(gm, example_inputs), example_inputs)


def _offload_device(example_inputs: Sequence[Any], config: OffloadConfig) -> torch.device | None:
    """The device of the first floating-point input on an offload device, or ``None``."""
    return next((x.device for x in example_inputs if isinstance(x, torch.Tensor)
                 and x.is_floating_point() and x.device.type in config.devices), None)


def _uses_pool(config: OffloadConfig, compiled: Callable[..., Any], example_inputs: Sequence[Any]) -> Callable[..., Any]:
    """Tell the host pool that ``compiled`` may use it while it and the model's
    parameters it takes are alive; after that the pool gives its idle memory back
    (``runtime/pool.py``). Registered is the function Dynamo keeps (it unwraps
    ``disable`` wrappers, ``innermost_fn``, and drops the one it was given)."""
    if config.policy == "none":
        return compiled
    from torch._dynamo.eval_frame import innermost_fn

    params = [x for x in example_inputs if isinstance(x, torch.nn.Parameter)]
    host_pool().register_graph(innermost_fn(compiled), owners=params)
    return compiled


def _warn_if_nothing_offloadable(gm: fx.GraphModule, example_inputs: Sequence[Any],
                                 config: OffloadConfig) -> None:
    """A WARNING, once per graph, when training a graph none of whose tensors is on a
    device type ``devices`` allows (the default ``("cuda",)`` on a CPU model): the graph
    then passes through unchanged, which is otherwise easy to miss."""
    if config.policy == "none" or not torch.is_grad_enabled():
        return
    tensors = [x for x in example_inputs if isinstance(x, torch.Tensor)]
    tensors += list(gm.parameters()) + list(gm.buffers())
    if not any(x.requires_grad for x in tensors):
        return  # no backward, nothing saved for it
    found = sorted({x.device.type for x in tensors if x.is_floating_point()})
    if not found or any(kind in config.devices for kind in found):
        return
    if found[0] == "cpu":
        hint = "the loopback mode, copies between host buffers: for tests"
    else:
        hint = f"supported device types: {', '.join(SUPPORTED_DEVICE_TYPES)}"
    log.warning(
        "offload: a compiled graph has its tensors on %s, none on a device type that "
        "devices=%r allows: nothing in it is offloaded or recomputed. Move the model to %s, "
        "or set options={\"devices\": (\"%s\",)} (%s)", " and ".join(found), config.devices,
        " or ".join(config.devices), found[0], hint)


# Dynamo lets an exception derived from its ``ShortenTraceback`` leave
# ``call_user_compiler`` as it is (anything else is wrapped in ``BackendCompilerFailed``)
# and cuts its traceback to start at the frame it names: the backend's. Torch 2.11 and
# 2.13 both do so.
try:
    from torch._dynamo.exc import ShortenTraceback as _ShortenTraceback
except ImportError:  # pragma: no cover - a torch without it wraps the error
    _ShortenTraceback = None


class InvalidOptions(*((_ShortenTraceback,) if _ShortenTraceback else ()), ValueError):
    """Options given to ``torch.compile(..., backend="offload", options=...)`` that are not
    valid: a ``ValueError`` naming the option and its valid values, raised by the backend
    before it traces anything, and passed by Dynamo to the caller unwrapped with a
    traceback that starts in the backend."""

    def __init__(self, message: str, frame: Any = None) -> None:
        if _ShortenTraceback is None:  # pragma: no cover
            super().__init__(message)
        else:
            super().__init__(message, first_useful_frame=frame)


def make_backend(config: OffloadConfig | Mapping[str, Any] | None = None, **options: Any) -> OffloadBackend:
    """A backend for ``torch.compile(model, backend=make_backend(...))``.

    Takes an :class:`OffloadConfig`, a dict of options, or options as keywords.
    """
    if config is not None and options:
        raise ValueError("give either a config or keyword options, not both")
    if isinstance(config, OffloadConfig):
        return OffloadBackend(config)
    return OffloadBackend(OffloadConfig.from_options(config if config is not None else options))


def offload_backend(
    gm: fx.GraphModule,
    example_inputs: Sequence[Any],
    *,
    options: Mapping[str, Any] | None = None,
    mode: str | None = None,
) -> Callable[..., Any]:
    """The function registered as ``backend="offload"``.

    Dynamo calls it once per captured graph, with ``torch.compile``'s ``options``; bad
    options raise :class:`InvalidOptions` here, before AOTAutograd traces anything
    (``torch.compile`` itself keeps ``options`` without looking at them; build the
    backend with :func:`make_backend` to have them checked at once)."""
    try:
        config = OffloadConfig.from_options(options)
    except ValueError as error:
        raise InvalidOptions(f"backend=\"offload\", options: {error}", inspect.currentframe()) from None
    backend = OffloadBackend(config)
    return backend(gm, example_inputs, mode=mode)


def register() -> None:
    """Register ``"offload"`` with Dynamo unless its entry point will do so.

    When the package is installed, Dynamo finds the backend through the
    ``torch_dynamo_backends`` entry point and registers it after importing this
    module; registering here as well would make it fail with a duplicate name.
    """
    from torch._dynamo.backends import registry

    if "offload" in registry._COMPILER_FNS:
        return
    if registry._BACKENDS.get("offload") is not None:  # entry point found, not loaded
        return
    registry.register_backend(offload_backend, name="offload")


class _Collect:
    """``on_plan`` of one compile: keeps its plans and adds them to the backend's. A class,
    not a closure: Inductor pickles the partitioner with its state for its cache key."""

    def __init__(self, into: list[GraphPlan]) -> None:
        self.into = into
        self.plans: list[GraphPlan] = []

    def __call__(self, plan: GraphPlan) -> None:
        self.into.append(plan)
        self.plans.append(plan)
