"""The ``offload`` backend for ``torch.compile``.

``torch.compile(model, backend="offload", options={...})`` calls :func:`offload_backend`
with Dynamo's FX graph; :func:`make_backend` builds the same from an
:class:`~offload_compiler.config.OffloadConfig` and keeps the plans it made.

``mode=`` is taken as Inductor takes it (``modes.py``). Under a mode with CUDA graphs the
transfers take their token form (``runtime/graph_slots.py``); a graph with dynamic sizes
runs without CUDA graphs (one warning), as does every graph when Inductor's CUDA graph
trees are turned off.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
import time
import weakref
from typing import Any, Callable, Mapping, Sequence

import torch
import torch._functorch.config as functorch_config
import torch.fx as fx

# Inductor's compiler, imported with the backend. ``torch.compile`` imports it for its
# own Inductor backend when it is called (``get_compiler_config``), before the first
# step; imported on the backend's first graph instead, it was the first step that paid
# for it (0.6 s on a 2-core CPU, torch 2.13; more on a GPU host, Triton's modules with
# it; ``benchmarks/RESULTS.md``, session 22).
from torch._inductor import compile_fx as inductor_compile_fx

from passes.provenance import graph_start

from . import lowering
from .config import SUPPORTED_DEVICE_TYPES, OffloadConfig
from .gc_scope import fewer_collections
from .modes import check_mode, mode_options, split_mode
from .partitioner import OffloadPartitioner
from .planning import cache, limits, sizes
from .planning.replan import Corrections
from .replanning import SETTLE_STEPS, MeasuredGraph
from .reporting.records import GraphPlan
from .runtime import measure
from .runtime.pool import host_pool

log = logging.getLogger("offload_compiler")
progress = logging.getLogger("offload_compiler.progress")

class OffloadBackend:
    """A ``torch.compile`` backend; ``plans`` lists what it decided, one per graph."""

    def __init__(self, config: OffloadConfig | None = None, *, mode: str | None = None) -> None:
        self.config = config if config is not None else OffloadConfig()
        check_mode(mode, self.config)
        self.mode = mode
        """The mode used when ``torch.compile`` passes none."""
        self.plans: list[GraphPlan] = []
        self._measured: weakref.WeakSet[MeasuredGraph] = weakref.WeakSet()
        self._compiles: dict[str, bool] = {}  # graphs compiled, whether said (:meth:`_note_compiled_again`)

    @property
    def settled(self) -> bool:
        """Every compiled graph of this backend has been measured (and planned again where
        that was called for), or will not be: later steps run the final plans."""
        return all(g.done for g in self._measured)

    def settle(self, step: Callable[[], Any]) -> int:
        """Call ``step`` (one training step, after the warm-up) until :attr:`settled`, at
        most ``SETTLE_STEPS`` times (the most measuring and re-planning take); returns how
        many steps ran."""
        steps = 0
        while not self.settled and steps < SETTLE_STEPS:
            step()
            steps += 1
        return steps

    @property
    def current_plans(self) -> list[GraphPlan]:
        """``plans`` less those a re-plan replaced (unless the graph went back to them) and
        those given up: the plans the graphs run now."""
        replaced = {p.replaces for p in self.plans if p.replaces is not None and not p.reverted}
        return [p for p in self.plans if p.graph_id not in replaced and not p.reverted]

    def __call__(
        self,
        gm: fx.GraphModule,
        example_inputs: Sequence[Any],
        *,
        options: Mapping[str, Any] | None = None,
        mode: str | None = None,
    ) -> Callable[..., Any]:
        options, mode = split_mode(options, mode)
        mode = self.mode if mode is None else mode
        patches = mode_options(mode)
        config = self.config if options is None else OffloadConfig.from_options(options)
        if config.inner_compiler == "inductor":
            _warm_compile_workers()
        _warn_if_nothing_offloadable(gm, example_inputs, config)
        self._note_compiled_again(gm, example_inputs)
        check_mode(mode, config)
        patches = _cudagraph_patches(gm, example_inputs, config, patches)
        per_size = sizes.PlanPerSize.for_graph(
            gm, example_inputs, config.policy,
            lambda graph, inputs, values: self._compile(graph, inputs, config, values, patches))
        if per_size is None:  # static sizes: one plan, as always
            return self._compile(gm, example_inputs, config, None, patches)
        return per_size  # dynamic sizes: a plan per range of sizes (planning/sizes.py)

    def _note_compiled_again(self, gm: fx.GraphModule, example_inputs: Sequence[Any]) -> None:
        """A WARNING the first time Dynamo recompiles a function into a graph this backend
        compiled for it before (the same code and input sizes), and at Dynamo's recompile
        limit. Three decoder layers of a Hugging Face Llama in training, compiled one at a
        time, were three compiles of one graph (each layer failed a guard on the KV cache
        its forward builds); with ten layers, layers nine and ten ran uncompiled, nothing in
        them offloaded (``benchmarks/RESULTS.md``, session 46). A compile after
        ``torch._dynamo.reset()`` is a first one again."""
        from torch._guards import CompileContext

        compile_id = CompileContext.current_compile_id()
        again = getattr(compile_id, "frame_compile_id", None) or 0  # Dynamo's recompiles of this frame
        sizes_ = tuple((tuple(x.shape), x.dtype) if isinstance(x, torch.Tensor) else type(x).__name__
                       for x in example_inputs)
        key = hashlib.sha1(repr((gm.code, sizes_, getattr(compile_id, "frame_id", None))).encode()).hexdigest()
        seen, said = key in self._compiles, self._compiles.get(key, False)
        self._compiles[key] = said
        limit = getattr(torch._dynamo.config, "recompile_limit", None) or torch._dynamo.config.cache_size_limit
        if not seen or again == 0 or (said and again + 1 != limit):
            return  # a first compile (the first after a reset too), or said already
        self._compiles[key] = True
        log.warning(
            "offload: the graph that starts at %s was compiled %d times: Dynamo compiled its function again "
            "because a guard failed (TORCH_LOGS=recompiles says which). Each compile costs what the first did, "
            "and once a function has been compiled torch._dynamo.config.recompile_limit (%d) times its further "
            "calls run uncompiled, nothing in them offloaded or recomputed. A Hugging Face model in training "
            "builds a KV cache unless called with use_cache=False, and each layer fails a guard on it",
            graph_start(gm), again + 1, limit)

    def _compile(
        self,
        gm: fx.GraphModule,
        example_inputs: Sequence[Any],
        config: OffloadConfig,
        planned_at: Mapping[Any, int] | None = None,
        patches: Mapping[str, Any] | None = None,
    ) -> Callable[..., Any]:
        """The inner compiler's callable for ``gm``, planned at the hints or, for a graph
        with dynamic sizes, at ``planned_at`` (size symbol to value); ``patches`` are the
        mode's Inductor options. For a static graph on a device the backend measures, and
        not recorded as a CUDA graph, wrapped to measure its first calls and plan again from
        the measurement (``replanning.py``)."""
        patches = dict(patches or {})
        slots = _records(patches) and config.policy != "none"
        device = _offload_device(example_inputs, config)
        corrections = limits.initial(config, device)
        measures = config.replan and config.policy != "none" and device is not None and not slots
        # Measured only: "all" (nothing to choose) and a graph with dynamic sizes.
        replans = measures and planned_at is None and config.policy == "cost_model"
        # "auto" searches its budget on the measured inputs of the re-plan, not twice.
        search = not (replans and measure.source.measures(device))
        compiled, plan = self._compile_planned(gm, example_inputs, config, planned_at, corrections,
                                               patches, slots, device, search)
        if not measures:
            return compiled

        def recompile(new: Corrections, args: list, veto: Callable[[GraphPlan], Any] | None = None,
                      ) -> tuple[Callable[..., Any] | None, GraphPlan | None]:
            return self._compile_planned(gm, args, config, planned_at, new, patches, slots, device, veto=veto)

        measured = MeasuredGraph(compiled, plan, device, corrections, recompile if replans else None,
                                 max_overhead=config.max_overhead if config.memory_budget == "auto" else None)
        self._measured.add(measured)
        return measured

    def _compile_planned(self, gm, example_inputs, config: OffloadConfig, planned_at,
                         corrections: Corrections, patches: dict[str, Any], slots: bool,
                         device: torch.device | None, search: bool = True,
                         veto: Callable[[GraphPlan], Any] | None = None,
                         ) -> tuple[Callable[..., Any] | None, GraphPlan | None]:
        """The graph planned and compiled with ``corrections``, and its plan; no callable
        where ``veto`` returned anything but ``None`` for the plan (planned, not compiled)."""
        made = _Collect(self.plans, device, veto)
        partitioner = OffloadPartitioner(
            config, on_plan=made, corrections=corrections, graph_slots=slots, search=search,
            cache_key=cache.key_for(gm, example_inputs, config, planned_at, corrections, search))

        def compile_inner():
            with fewer_collections():  # AOTAutograd's trace, planning, the forward's compile
                return self._inner_compile(gm, example_inputs, config, sizes.at_sizes(partitioner, planned_at),
                                           patches)
        t0 = time.perf_counter()
        try:
            compiled = compile_inner()
            # No partition: Inductor's (or AOTAutograd's) cache held the graphs, or no backward is needed.
            # The plan goes to ``made`` (and its veto) from the plan cache; where that cannot tell it
            # (off, or the entry gone), the graph is compiled again without AOTAutograd's cache.
            if not partitioner.called and torch.is_grad_enabled():
                known = partitioner.report_cached() is not None
                if not known and any(isinstance(x, torch.Tensor) and x.requires_grad for x in example_inputs):
                    with functorch_config.patch(enable_autograd_cache=False):
                        compiled = compile_inner()
            took = time.perf_counter() - t0
        except Exception:
            if not made.vetoed:
                raise
            return None, made.plans[-1]  # whatever torch made of the exception on its way out
        if made.plans and partitioner.called:
            progress.info("offload: graph %d: compiled in %.1f s: %.1f s in the offload partitioner "
                          "(min-cut, planning, the rewrite), %.1f s AOTAutograd's trace and the inner "
                          "compiler's forward (the backward compiles at its first call)",
                          made.plans[-1].graph_id, took, partitioner.seconds, took - partitioner.seconds)
        return compiled, (made.plans[-1] if made.plans else None)


    @staticmethod
    def _inner_compile(gm, example_inputs, config: OffloadConfig, partitioner, patches):
        if config.inner_compiler == "inductor":
            lowering.install()

            return _uses_pool(config, inductor_compile_fx.compile_fx(
                gm, example_inputs, inner_compile=lowering.compile_inner,
                config_patches={**patches, "custom_partitioner_fn": partitioner},
            ), example_inputs, fixed_buffers=_records(patches))
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


def _warm_compile_workers() -> None:
    """Start Inductor's kernel-compiling subprocesses now, as Inductor's own backend does
    on entry (``torch/_dynamo/backends/inductor.py``): they start up while AOTAutograd
    traces and the planner plans, instead of when the forward's first kernel is handed
    to them. Without it the forward's compile waited for them: 1.3 s longer on the
    example GPT's ``h100`` preset on an H100 (``benchmarks/RESULTS.md``, session 13)."""
    try:
        from torch._inductor.async_compile import maybe_warm_pool
    except ImportError:  # pragma: no cover - a torch without it
        return
    maybe_warm_pool()


def _offload_device(example_inputs: Sequence[Any], config: OffloadConfig) -> torch.device | None:
    """The device of the first floating-point input on an offload device, or ``None``."""
    return next((x.device for x in example_inputs if isinstance(x, torch.Tensor)
                 and x.is_floating_point() and x.device.type in config.devices), None)


def _uses_pool(config: OffloadConfig, compiled: Callable[..., Any], example_inputs: Sequence[Any],
               fixed_buffers: bool = False) -> Callable[..., Any]:
    """Tell the host pool that ``compiled`` may use it while it and the model's
    parameters it takes are alive; after that the pool gives its idle memory back
    (``runtime/pool.py``). Registered is the function Dynamo keeps (it unwraps
    ``disable`` wrappers, ``innermost_fn``, and drops the one it was given).
    ``fixed_buffers``: compiled for CUDA graphs."""
    if config.policy == "none":
        return compiled
    from torch._dynamo.eval_frame import innermost_fn

    params = [x for x in example_inputs if isinstance(x, torch.nn.Parameter)]
    host_pool().register_graph(innermost_fn(compiled), owners=params, fixed_buffers=fixed_buffers)
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


def _records(patches: Mapping[str, Any]) -> bool:
    """Whether Inductor may record the graphs compiled with ``patches``."""
    return bool(patches.get("triton.cudagraphs")) and not patches.get("triton.cudagraph_skip_dynamic_graphs")


def _cudagraph_patches(gm: fx.GraphModule, example_inputs: Sequence[Any], config: OffloadConfig,
                       patches: dict[str, Any]) -> dict[str, Any]:
    """``patches`` with CUDA graphs turned off where offloading cannot run under them,
    saying so once per graph: Inductor's CUDA graph trees turned off (the token transfers
    rely on their rules), or dynamic sizes (Inductor would record a graph per size, each
    holding host buffers for good; Inductor's own ``cudagraph_skip_dynamic_graphs``)."""
    if not patches.get("triton.cudagraphs") or config.policy == "none":
        return patches
    from torch._inductor import config as inductor_config
    from torch._inductor.utils import any_is_symbolic

    where = graph_start(gm)
    if not inductor_config.triton.cudagraph_trees:
        log.warning("offload: the graph from %s runs without CUDA graphs: offloading under CUDA graphs "
                    "needs Inductor's CUDA graph trees (torch._inductor.config.triton.cudagraph_trees)",
                    where)
        return {**patches, "triton.cudagraphs": False}
    if any_is_symbolic(*example_inputs):
        log.warning("offload: the graph from %s has dynamic sizes and runs without CUDA graphs (a "
                    "recording per size would each hold the offloaded activations' host buffers)", where)
        return {**patches, "triton.cudagraph_skip_dynamic_graphs": True}
    return patches


def make_backend(config: OffloadConfig | Mapping[str, Any] | None = None, *, mode: str | None = None,
                 **options: Any) -> OffloadBackend:
    """A backend for ``torch.compile(model, backend=make_backend(...))``.

    Takes an :class:`OffloadConfig`, a dict of options, or options as keywords, and a
    ``mode`` (``modes.VALID_MODES``) used when ``torch.compile`` passes none.
    """
    if config is not None and options:
        raise ValueError("give either a config or keyword options, not both")
    if isinstance(config, OffloadConfig):
        return OffloadBackend(config, mode=mode)
    options, mode = split_mode(config if config is not None else options, mode)
    return OffloadBackend(OffloadConfig.from_options(options), mode=mode)


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
        options, mode = split_mode(options, mode)
        config = OffloadConfig.from_options(options)
        backend = OffloadBackend(config, mode=mode)
    except ValueError as error:
        raise InvalidOptions(f"backend=\"offload\", options: {error}", inspect.currentframe()) from None
    return backend(gm, example_inputs)


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
    """``on_plan`` of one compile: keeps its plans and adds them to the backend's, and on a
    CUDA ``device`` has the host pool pin the blocks one call of the plan checks out while
    Inductor compiles the graphs (``runtime/prefill.py``), not in the first step."""

    def __init__(self, into: list[GraphPlan], device: torch.device | None = None,
                 veto: Callable[[GraphPlan], Any] | None = None) -> None:
        self.into, self.plans, self.device, self.veto, self.vetoed = into, [], device, veto, False

    def __call__(self, plan: GraphPlan) -> None:
        self.into.append(plan)
        self.plans.append(plan)
        if self.veto is not None and self.veto(plan) is not None:
            self.vetoed = True  # ends the compile before Inductor's: ``_compile_planned`` returns no callable
            raise RuntimeError(f"offload: graph {plan.graph_id}: refused by its veto, not compiled")
        if self.device is not None and self.device.type == "cuda" and plan.offloaded:
            host_pool().prefill([d.nbytes for d in plan.offloaded], pinned=True)
