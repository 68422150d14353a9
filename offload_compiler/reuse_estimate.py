"""Inductor's buffer reuse, weighed against a peak estimate that counts a graph's outputs.

Inductor keeps a dead buffer for a later one of its size (``allow_buffer_reuse``) only
where holding it does not raise its own estimate of the graph's peak
(``codegen/wrapper.py``: ``EfficientPeakEstimate``, ``AllocateLine.should_reuse_buffer``;
``planning/step_peak.py`` replays that rule). In torch 2.11 that estimate cancels every
graph output at the graph's start (``memory.estimate_peak_memory`` frees a buffer at
``end_step + 1``, and an output's ``end_step`` is -1, so its free lands on step 0); torch
2.13 skips the free of an output. A training forward's outputs are the activations it
saves, nearly all it allocates, so its estimated peak is about the largest transient: on
an H200 with torch 2.11, 0.02 GiB for ResNet-50's forward with nothing moved (5.11 GiB
saved) and under 0.01 GiB for a plan that recomputed 74 values. Against that, a reuse
of two separated buffers is refused wherever the buffer is larger than the estimated
peak: the recompute-only plan's forward refused 349 of the 363 reuses weighed, where
nothing moved refused 2 of 299, and it made 599 device allocations a forward against
327 (``benchmarks/RESULTS.md``, session 45): each an allocation and a free the host
issues, and not the reuse the planner's step-peak replay assumed (the measured step peak
did not move: 3.9 GiB either way).

:func:`install` has each estimate made while the backend compiles one of its graphs
(inside :func:`counting`, which ``lowering.compile_inner`` enters) count the outputs as
live to the end, as torch 2.13 does; an estimate made for any other compile in the
process is left as Inductor made it. On torch 2.13 the two agree but for host memory:
in a graph on a GPU, the estimate also leaves out what the graph holds on the host. A
forward that offloads (``lowering.compile_inner`` keeps its pool) returns each host copy
as an output, which Inductor's estimate counts as device memory from its ``d2h`` to the
end, beside the device tensor it copies; the planner's step-peak replay counts only the
device's bytes, and the two then weigh each reuse alike.

Inductor sizes its buffers for the estimate only in its peak-memory reordering
(``memory.assign_memory_planning_info_for_scheduler_buffers``), which a graph with transfer
ops is compiled without (``lowering.compile_inner``); there every buffer weighed 0 bytes,
the estimated peak was the graph's inputs, and nearly every reuse was refused (on an H100,
ResNet-50's forward offloading 25 tensors made 614 device allocations against 327 with
nothing moved; ``benchmarks/RESULTS.md``, session 48). The estimate sizes them itself there.
Where this torch lacks the pieces (``compute_memory_timeline``, ``get_freeable_input_buf``,
``assign_memory_planning_info_for_scheduler_buffers``) or they fail on a graph, Inductor's
own estimate stays (a debug log says so).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import operator
import threading
from typing import Any, Iterator, Sequence

log = logging.getLogger("offload_compiler")

_MARK = "_offload_counts_outputs"
_scope = threading.local()  # how deep this thread is in the backend's compiles


@contextlib.contextmanager
def counting() -> Iterator[None]:
    """Estimates made on this thread inside the scope count graph outputs (module docstring)."""
    _scope.depth = getattr(_scope, "depth", 0) + 1
    try:
        yield
    finally:
        _scope.depth -= 1


def curve_with_outputs(buffers: Sequence[Any], steps: int) -> list[int]:
    """Bytes live at each of ``steps + 1`` points, from ``buffers`` (Inductor's
    ``BufferInfo``: ``size_alloc`` from ``start_step``, ``size_free`` after ``end_step``;
    ``end_step`` -1: a graph output, live to the end)."""
    delta = [0] * (steps + 1)
    for b in buffers:
        delta[b.start_step] += b.size_alloc
        if b.end_step != -1:
            delta[b.end_step + 1] -= b.size_free
    return list(itertools.accumulate(delta))


def install() -> bool:
    """Wrap ``EfficientPeakEstimate`` once (idempotent); ``False`` where this torch has
    no such estimate or not the pieces to count outputs with."""
    try:
        from torch._inductor import memory
        from torch._inductor.codegen import wrapper
    except ImportError as err:  # pragma: no cover - torch without these internals
        log.debug("offload: buffer reuse estimate left as Inductor's (%s)", err)
        return False
    cls = getattr(wrapper, "EfficientPeakEstimate", None)
    needed = ("compute_memory_timeline", "get_freeable_input_buf", "assign_memory_planning_info_for_scheduler_buffers")
    missing = [n for n in ("EfficientPeakEstimate",) if cls is None] + [n for n in needed if not hasattr(memory, n)]
    if missing:
        log.debug("offload: buffer reuse estimate left as Inductor's (this torch has no %s)", ", ".join(missing))
        return False
    if getattr(cls.__init__, _MARK, False):
        return True
    made = cls.__init__

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        made(self, *args, **kwargs)
        if getattr(_scope, "depth", 0) > 0:
            _count_outputs(self, memory)

    setattr(__init__, _MARK, True)
    cls.__init__ = __init__
    return True


def _count_outputs(estimate: Any, memory: Any) -> None:
    from torch._inductor import config
    from torch._inductor.virtualized import V
    from torch.utils._ordered_set import OrderedSet

    try:
        nodes = V.graph.scheduler.nodes
        if not config.reorder_for_peak_memory:  # only that pass sizes the buffers
            memory.assign_memory_planning_info_for_scheduler_buffers(nodes, V.graph.scheduler.name_to_buf)
        freeable = memory.get_freeable_input_buf(nodes, OrderedSet(V.graph.graph_inputs.keys()))
        buffers = memory.compute_memory_timeline(nodes, freeable, OrderedSet(V.graph.get_output_names()))[0]
        curve = curve_with_outputs(on_device(buffers, V.graph), len(nodes))
        tree = type(estimate.segmented_tree)(curve, operator.add, max, 0)
    except Exception as err:  # an Inductor whose pieces differ: its own estimate stays
        log.debug("offload: buffer reuse estimate left as Inductor's for this graph (%s: %s)",
                  type(err).__name__, err)
        return
    estimate.overall_peak_memory, estimate.segmented_tree = max(0, max(curve)), tree


def on_device(buffers: Sequence[Any], graph: Any) -> list:
    """``buffers`` (``BufferInfo``) less those on the host, where ``graph`` (Inductor's
    ``GraphLowering``) runs on a device besides the host: a host copy holds no device
    memory (module docstring)."""
    if all(t == "cpu" for t in graph.device_types):
        return list(buffers)
    return [b for b in buffers if _device_type(b.buffer, graph) != "cpu"]


def _device_type(buffer: Any, graph: Any) -> str:
    """Where ``buffer`` (a ``SchedulerBuffer``, or a graph input's ``FreeableInputBuffer``) lives."""
    node = getattr(buffer, "node", None)
    if node is None:
        node = graph.graph_inputs.get(buffer.get_name())
    device = node.get_device() if node is not None else None
    return device.type if device is not None else ""
