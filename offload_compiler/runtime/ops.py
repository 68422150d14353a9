"""The transfer ops: ``offload::d2h``, ``offload::release``, ``offload::h2d``, ``offload::wait``.

Forward, for an offloaded activation ``x``::

    x_host = offload.d2h(x)          # copy on the D2H stream into a pooled host buffer
    ...                               # other uses of x
    offload.release(x, x_host, anchor) # compute stream waits for the copy; x may go

Backward::

    x_dev = offload.h2d(x_host, anchor, device)   # copy on the H2D stream
    offload.wait(x_dev)                             # compute stream waits for it
    ... consumers of x_dev

Position is held by data dependencies, not by graph order alone (Inductor hoists an
extern kernel whose inputs are all graph inputs, and reorders ops without a tensor
dependency): ``release`` takes ``host`` (so it follows its copy) and an ``anchor``
tensor computed at its intended point, which Inductor cannot move it above; ``h2d``
takes an ``anchor`` the same way; ``wait`` is declared as writing ``x_dev``, so every
reader of ``x_dev`` runs after it. ``release`` is declared as writing ``host``, which
keeps it through dead-code elimination. Both writes are nominal: no op writes any data
but the copies' own destinations. ``release`` must not be declared as writing ``src``:
Inductor then writes out every fused reader of ``src`` lowered before it, which splits
fusions (the tiny example GPT with every activation offloaded: 20 fused kernels in
Inductor's CPU forward with that declaration, 12 without, 8 with no transfers).
Anchors are tensors Inductor materializes anyway, for the same reason (see
:func:`passes.placement.materialized`).

``release`` keeps the source alive through its argument until the compute stream has
been told to wait for the copy, so the caching allocator cannot hand the storage to a
later kernel while the copy still reads it. No op calls ``record_stream`` or blocks
the host. The op bodies are plain functions (``copy_to_host``, ``release_source``,
``copy_to_device``, ``wait_for_copy``) so that tools that cannot see inside a custom
op, such as PyTorch's CUDA sanitizer, can check them directly.

Fallback: if no host block can be had, ``d2h`` returns a device copy instead of a host
one (more memory for a while, never a wrong result), and ``h2d`` copies that back.

Strides: a dense activation keeps its strides through the host; a non-dense one (a
slice with gaps) is packed contiguously on the host and ``h2d`` restores its strides.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, List, Optional

import torch
from torch import Tensor

from . import measure, streams
from .pool import host_pool

log = logging.getLogger(__name__)

NAMESPACE = "offload"


_TAGS = tuple(
    t for t in (getattr(torch.Tag, "needs_exact_strides", None),) if t is not None
)


def _host_strides(src: Tensor, keep_strides: bool) -> list:
    """Strides of the host copy: ``src``'s own when it is dense, else contiguous."""
    return list(src.stride()) if keep_strides else list(torch._prims_common.make_contiguous_strides_for(src.shape))


def _dense(t: Tensor) -> bool:
    """Strides cover exactly ``numel`` elements with no overlap."""
    if t.is_contiguous():  # the common case, answered in C++
        return True
    dims = sorted((st, sz) for sz, st in zip(t.shape, t.stride()) if sz > 1)
    reach = 1
    for stride, size in dims:
        if stride != reach:
            return False
        reach *= size
    return True


def copy_to_host(src: Tensor, keep_strides: bool) -> Tensor:
    """Body of ``offload::d2h``: copy ``src`` to a pooled host buffer (pinned for CUDA) and return the host tensor.

    ``keep_strides`` (decided at compile time: ``src`` is dense) gives the host copy
    ``src``'s strides; otherwise it is packed contiguously and :func:`h2d` restores
    the strides.
    """
    if keep_strides and not _dense(src):
        raise RuntimeError(
            f"offload.d2h: planned as dense but got shape {tuple(src.shape)} strides "
            f"{src.stride()}; refusing to copy (please report this)"
        )
    # What the host copy looks like: ``src`` itself when dense (no meta tensor to make).
    like = src if keep_strides else torch.empty_strided(
        src.shape, _host_strides(src, False), dtype=src.dtype, device="meta")
    if src.device.type == "cuda":
        return _d2h_cuda(src, like)
    got = host_pool().acquire(like, pinned=False)
    if got is None:
        return _device_copy(src, like)
    host, _ = got
    host.copy_(src)
    chain.note("d2h", src, host)
    return host


def _device_copy(src: Tensor, like: Tensor) -> Tensor:
    """Fallback when no host block can be had: a copy on ``src``'s device, laid out as
    the host copy would have been (``h2d`` then copies it back)."""
    return torch.empty_strided(like.shape, like.stride(), dtype=src.dtype, device=src.device).copy_(src)


def _d2h_cuda(src: Tensor, like: Tensor) -> Tensor:
    compute = streams.current(src.device)  # the live stream, read first
    got = host_pool().acquire(like, pinned=True)
    if got is None:
        return _device_copy(src, like)
    host, block = got
    stream = streams.copy_stream(src.device, streams.D2H)
    streams.follow(stream, compute)
    for event in block.events:  # copies that read this block since it was last filled are done
        stream.wait_event(event)
    # The copy that last filled it: ordered already where this stream issued it.
    if block.ready_event is not None and not block.filled_on(stream):
        stream.wait_event(block.ready_event)
    start = measure.copy_started(stream) if measure.active is not None else None
    with streams.on(stream, compute):
        streams.inject_delay(streams.D2H)
        host.copy_(src, non_blocking=True)
    if start is not None:
        measure.copy_done(stream, start, "d2h", src.numel() * src.element_size())
    block.events = []
    block.ready_event = block.mark(stream, streams.D2H)
    chain.note("d2h", src, host)
    return host


def _d2h_fake(src: Tensor, keep_strides: bool) -> Tensor:
    return torch.empty_strided(
        src.size(), _host_strides(src, keep_strides), dtype=src.dtype, device="cpu"
    )


def release_source(src: Tensor, host: Tensor) -> None:
    """Body of ``offload::release``: the compute stream waits for the copy of ``src``
    into ``host``; after that, freeing ``src`` is safe. Releases an earlier graph left
    to this one (``chain.release_later``) complete first."""
    chain.settle_before(src)
    chain.note("release", src)
    if src.device.type != "cuda" or host.device.type != "cpu":
        return
    block = host_pool().lookup(host)
    if block is not None and block.ready_event is not None:
        _wait(streams.current(src.device), block.ready_event)


def _wait(compute: torch.cuda.Stream, event: torch.cuda.Event) -> None:
    """``compute`` waits for ``event``; measured as a stall while a recorder is active."""
    if measure.active is None:
        compute.wait_event(event)
        return
    before = measure.stall_before(compute)
    compute.wait_event(event)
    measure.stall_after(compute, before)


def _release(src: Tensor, host: Tensor, anchor: Optional[Tensor]) -> None:
    """``anchor`` is not read: it keeps the release after the node that produces it
    (Inductor would otherwise hoist it next to its copy and stall compute on it)."""
    release_source(src, host)


def copy_to_device(host: Tensor, anchor: Optional[Tensor], device: str, stride: Optional[List[int]]) -> Tensor:
    """Body of ``offload::h2d``: copy ``host`` back to ``device`` on the H2D stream; pair with :func:`wait`.

    ``anchor`` is not read: it only orders this op after the node that produces it.
    The result has the original tensor's strides (storage offset 0): ``host``'s own,
    or ``stride`` when the host copy was packed. A copy the previous block's backward
    already issued (``chain.prefetch_next``) is taken instead of copied again.
    """
    out = chain.take(host, device, stride)
    if out is None:
        out = issue_copy_to_device(host, torch.device(device), stride)
    chain.note("h2d", out, host)
    return out


def issue_copy_to_device(host: Tensor, target: torch.device, stride: Optional[List[int]]) -> Tensor:
    """Issue the copy of ``host`` to ``target`` and return its result; the completion
    event is kept for :func:`wait_for_copy` (or :func:`take_pending`)."""
    stride = host.stride() if stride is None else stride
    out = torch.empty_strided(host.size(), stride, dtype=host.dtype, device=target)
    if host.device.type != "cpu" or target.type != "cuda":  # loopback, or d2h fell back
        out.copy_(host)
        return out
    compute = streams.current(target)  # the live stream, read first
    stream = streams.copy_stream(target, streams.H2D)
    # The copy writes memory the compute stream allocated: order it after compute so
    # far, and after the D2H copy that filled the host buffer.
    streams.follow(stream, compute)
    block = host_pool().lookup(host)
    if block is not None and block.ready_event is not None:
        stream.wait_event(block.ready_event)
    start = measure.copy_started(stream) if measure.active is not None else None
    with streams.on(stream, compute):
        streams.inject_delay(streams.H2D)
        out.copy_(host, non_blocking=True)
    if start is not None:
        measure.copy_done(stream, start, "h2d", out.numel() * out.element_size())
    if block is None:
        done = streams.mark_ready(stream)
    else:
        done = block.mark(stream, streams.H2D)
        if all(e is not done for e in block.events):  # one per device: recorded again, listed once
            block.events.append(done)
    _pending[out.untyped_storage().data_ptr()] = done
    return out


def _h2d_fake(host: Tensor, anchor: Optional[Tensor], device: str, stride: Optional[List[int]]) -> Tensor:
    stride = host.stride() if stride is None else stride
    return torch.empty_strided(host.size(), stride, dtype=host.dtype, device=torch.device(device))


# Completion events of H2D copies whose wait has not run yet, by device pointer.
_pending: dict[int, torch.cuda.Event] = {}


def take_pending(out: Tensor) -> Optional[torch.cuda.Event]:
    """The completion event of the copy into ``out``, no longer kept for :func:`wait_for_copy`."""
    return _pending.pop(out.untyped_storage().data_ptr(), None)


def put_pending(out: Tensor, event: Optional[torch.cuda.Event]) -> None:
    """Keep ``event`` as the completion of the copy into ``out``, for :func:`wait_for_copy`."""
    if event is not None:
        _pending[out.untyped_storage().data_ptr()] = event


def wait_for_copy(x: Tensor) -> None:
    """Body of ``offload::wait``: the live compute stream waits until the H2D copy
    into ``x`` is done."""
    chain.note("wait", x)
    if x.device.type != "cuda":
        return
    event = _pending.pop(x.untyped_storage().data_ptr(), None)
    if event is not None:
        _wait(streams.current(x.device), event)


def _nothing(*args) -> None:
    return None


# The ops are declared with ``torch.library.Library`` and plain kernels rather than
# ``torch.library.custom_op``: the latter's autograd and view/inplace wrappers are
# Python functions run on every call (about 30 us each on CPU, against 3 us here),
# and a forward issues two of these ops per offloaded tensor on the step's critical
# host path. None of the ops needs autograd: they only appear in graphs AOTAutograd
# has already split into forward and backward, which run under no_grad. While a call
# is measured, each kernel's host time is counted (``measure.host_timed``).
_lib = torch.library.Library(NAMESPACE, "DEF")
_OPS = (
    # (schema, kernel, fake, tags)
    ("d2h(Tensor src, bool keep_strides) -> Tensor", measure.host_timed(copy_to_host), _d2h_fake, _TAGS),
    # ``host`` is declared written (it is not): that keeps the op through dead-code
    # elimination and after the copy. ``src`` is not declared written: Inductor
    # realizes every pending reader of a written buffer, which split fusions.
    ("release(Tensor src, Tensor(a!) host, Tensor? anchor) -> ()", measure.host_timed(_release), _nothing, ()),
    ("h2d(Tensor host, Tensor? anchor, str device, int[]? stride) -> Tensor",
     measure.host_timed(copy_to_device), _h2d_fake, ()),
    ("wait(Tensor(a!) x) -> ()", measure.host_timed(wait_for_copy), _nothing, ()),
)


#: The attribute of each op's ``OpOverload`` that holds its kernel callable without the
#: dispatcher (:func:`direct`); Inductor's code for a graph with transfer ops calls it
#: (``lowering.call_directly``).
DIRECT = "_offload_direct"


def define(lib: torch.library.Library, entries) -> None:
    """Define each ``(schema, kernel, fake, tags)`` of ``entries`` in ``lib`` (this
    namespace): the kernel for every backend, the fake for tracing, and the op's
    :data:`DIRECT` call. Shared by the token ops (``graph_slots.py``) and the chain ops
    (``chain.py``)."""
    namespace = getattr(torch.ops, NAMESPACE)
    for schema, kernel, fake, tags in entries:
        name = schema.split("(", 1)[0]
        lib.define(schema, tags=tags)
        lib.impl(name, kernel, "CompositeExplicitAutograd")
        torch.library.register_fake(f"{NAMESPACE}::{name}", fake, lib=lib)
        packet, _, overload = name.partition(".")
        op = getattr(getattr(namespace, packet), overload or "default")
        setattr(op, DIRECT, direct(op, kernel))


def direct(op: torch._ops.OpOverload, kernel: Callable[..., Any]) -> Callable[..., Any]:
    """``op``'s kernel called as Python, without the dispatcher: each transfer op is a
    Python function behind a C++ dispatch, on the step's critical host path four times
    per offloaded tensor. On an H100 host a ``d2h`` and ``release`` pair took 68.1 us
    through the dispatcher and 60.7 us directly, an ``h2d`` and ``wait`` pair 34.0 and
    27.7 us (``benchmarks/RESULTS.md``, session 39). Inductor's code passes plain
    tensors (subclasses were traced through); a dispatch mode active around the
    compiled call does not see these ops, as it does not see Inductor's own kernels.
    While a profiler records, the call goes through ``op`` so that the trace names it
    (``offload::d2h``); so does a call with keywords (the dispatcher binds them)."""
    enabled = torch._C._autograd._profiler_enabled

    def call(*args: Any, **kwargs: Any) -> Any:
        if kwargs or enabled():
            return op(*args, **kwargs)
        return kernel(*args)

    call.__name__ = call.__qualname__ = f"{op.name()}_direct"
    return call


define(_lib, _OPS)

# Op handles used by the graph passes (OpOverloads, as they appear in FX graphs).
D2H = torch.ops.offload.d2h.default
RELEASE = torch.ops.offload.release.default
H2D = torch.ops.offload.h2d.default
WAIT = torch.ops.offload.wait.default
TRANSFER_OPS = (D2H, RELEASE, H2D, WAIT)

for _op in (RELEASE, WAIT):
    torch.fx.node.has_side_effect(_op)

# Cross-graph prefetch (``per_block``): its ops extend this namespace, and the ops above
# call into it. Imported last: it needs the namespace defined.
from . import chain  # noqa: E402
