"""Calls in a chain: cross-graph prefetch for models compiled one block at a time.

With ``per_block=True`` every compiled graph is taken to be one call of a chain (each
block compiled on its own, or one compiled block called once per layer): forward calls
run in order, and their backwards in the reverse order. The state here lives outside
any one graph, per process, and links the calls:

- at the end of each forward call, ``offload::push_reloads(first, hosts, device)``
  registers the call (known by the host copy ``first``, the one its backward reloads
  first) and the host copies its backward reloads first (``hosts``, in issue order);
- in each backward, ``offload::prefetch_next(own, anchor)``, placed after the call's
  own reloads, takes the call off the chain and issues, on the H2D stream, the first
  reloads of the backward that runs next: the most recent forward call still waiting
  for its backward. That backward's ``offload::h2d`` then finds its tensor in flight
  (:func:`take`) instead of copying it, and ``offload::wait`` waits for it as usual;
- ``offload::release_later`` is a release at the end of a forward graph that does not
  make compute wait for its copy: the source is carried (kept alive here) and the wait
  is made by the next transfer op of a later graph on the device (:func:`settle`),
  normally the next block's first release, after which the source may go. The D2H
  stream runs copies in order, so by then the carried copy is done.

Ordering follows the runtime rules of ``docs/design.md``: a prefetch allocates its
result on the live compute stream and its copy waits for compute at that point and for
the D2H copy that filled the host block; the consumer waits on the copy's event; a
prefetched tensor dropped unused (its backward never ran, or ran with other inputs) is
dropped only after the compute stream was told to wait for its copy; nothing blocks the
host, nothing calls ``record_stream``.

Nothing here keeps a host block checked out: calls and prefetches refer to blocks
weakly, by the pool's checkout number, and are dropped once the block is idle or
handed out again (a backward that never ran: ``torch.no_grad`` forwards register
nothing; an exception, a graph freed unused). Every entry point first drops such
stale entries; :func:`pending` reports what is left and :func:`clear` drops all.

:func:`record` turns on a log of the order of transfer operations, for tests: which
copies were issued, prefetched, taken and waited for, by forward call.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import weakref
from typing import Iterator, List, NamedTuple, Optional

import torch
from torch import Tensor

from . import ops, streams
from .pool import HostBlock, host_pool

log = logging.getLogger(__name__)


class Step(NamedTuple):
    """One recorded transfer operation (see :func:`record`)."""

    op: str
    """``d2h``, ``release``, ``carry`` (a release left to a later graph), ``settle`` (a
    carried release completed), ``push`` (a forward call registered), ``prefetch`` (a
    reload issued for the next backward), ``h2d`` (a reload issued by its own
    backward), ``take`` (its own backward found it prefetched), ``wait``, ``discard``
    (a prefetched reload dropped unused)."""
    call: Optional[int]
    """The forward call the tensor belongs to (calls are numbered in forward order from
    0 per process), ``None`` where unknown."""
    tensor: str
    """The tensor: dtype and shape, e.g. ``float32[4, 64, 64]``."""


@dataclasses.dataclass
class _Spec:
    """A host copy a backward reloads first: its block, weakly, and its layout."""

    block: "weakref.ref[HostBlock]"
    checkout: int
    shape: tuple
    stride: tuple
    dtype: torch.dtype
    call: int

    @staticmethod
    def of(host: Tensor, call: int) -> "_Spec | None":
        block = host_pool().lookup(host)
        if block is None or host.storage_offset() != 0:
            return None  # d2h fell back to a device copy: nothing to prefetch
        return _Spec(weakref.ref(block), block.last_used, tuple(host.shape), tuple(host.stride()),
                     host.dtype, call)

    def alive(self) -> HostBlock | None:
        """The block, if it still holds this copy (checked out, not handed out again)."""
        block = self.block()
        if block is None or block.last_used != self.checkout or not block.in_use():
            return None
        return block

    def key(self) -> int:
        block = self.block()
        return block.buffer.data_ptr() if block is not None else 0


@dataclasses.dataclass
class _Call:
    """A forward call whose backward has not run yet."""

    number: int
    ident: _Spec
    device: torch.device
    first: List[_Spec]


@dataclasses.dataclass
class _Prefetched:
    out: Tensor
    done: Optional[torch.cuda.Event]
    spec: _Spec


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: list[_Call] = []  # in forward order
        self.prefetched: dict[int, _Prefetched] = {}  # by host block address
        self.carried: list[tuple[Tensor, Optional[torch.cuda.Event]]] = []
        self.next_number = 0  # the number of the forward call now running


_state = _State()
_log: list[Step] | None = None  # the recorder, when on
_calls_of: dict[int, int] = {}  # host block address -> forward call, while recording


def _label(t: Tensor) -> str:
    return f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)}"


def note(op: str, t: Tensor, host: Tensor | None = None) -> None:
    """Record ``op`` on ``t`` if the recorder is on. ``host``: the host copy ``t`` is
    copied to (``d2h``) or from (``h2d``), which names the forward call."""
    if _log is None:
        return
    ptr = t.untyped_storage().data_ptr()
    if host is not None:
        host_ptr = host.untyped_storage().data_ptr()
        if op == "d2h":
            _calls_of[host_ptr] = _state.next_number
        _calls_of[ptr] = _calls_of.get(host_ptr)
    _log.append(Step(op, _calls_of.get(ptr), _label(t)))


@contextlib.contextmanager
def record() -> Iterator[list[Step]]:
    """Log every transfer operation, in the order issued, as :class:`Step` tuples in the
    list yielded (for tests: the order of operations, never their timing). Callers may
    append their own markers to it."""
    global _log
    steps: list[Step] = []
    _log, _calls_of_before = steps, dict(_calls_of)
    try:
        yield steps
    finally:
        _log = None
        _calls_of.clear()
        _calls_of.update(_calls_of_before)


# -- forward -----------------------------------------------------------------------

def push_reloads(first: Tensor, hosts: List[Tensor], device: str) -> None:
    """Body of ``offload::push_reloads``: register this forward call, known by the host
    copy ``first``, and the host copies its backward reloads first."""
    number = _state.next_number
    ident = _Spec.of(first, number)
    if ident is None:
        return
    target = _device(device)
    specs = [s for s in (_Spec.of(h, number) for h in hosts) if s is not None]
    with _state.lock:
        _prune()
        _state.next_number = number + 1
        _state.calls.append(_Call(number, ident, target, specs))
    if _log is not None:
        _log.append(Step("push", number, _label(first)))


def release_later(src: Tensor, host: Tensor, anchor: Optional[Tensor]) -> None:
    """Body of ``offload::release_later``: a release that leaves the wait to a later
    graph; ``src`` is kept alive here until then."""
    settle_before(src)
    event = None
    if src.device.type == "cuda" and host.device.type == "cpu":
        block = host_pool().lookup(host)
        event = block.ready_event if block is not None else None
    with _state.lock:
        _state.carried.append((src, event))
    note("carry", src, host)


def settle_before(t: Tensor) -> None:
    """:func:`settle` on ``t``'s device, if anything is carried (cheap when nothing is)."""
    if _state.carried:
        settle(t.device)


def settle(device: torch.device) -> None:
    """Complete the releases carried on ``device``: the live compute stream waits for
    their copies, then their sources may go."""
    if not _state.carried:
        return
    with _state.lock:
        mine = [c for c in _state.carried if c[0].device == device]
        _state.carried = [c for c in _state.carried if c[0].device != device]
    for src, event in mine:
        if event is not None:
            streams.current(src.device).wait_event(event)
        if _log is not None:
            _log.append(Step("settle", None, _label(src)))


# -- backward ----------------------------------------------------------------------

def prefetch_next(own: Tensor, anchor: Optional[Tensor]) -> None:
    """Body of ``offload::prefetch_next``: take the call whose backward runs (known by
    ``own``) off the chain and prefetch the first reloads of the next one."""
    if not _state.calls:
        return
    key = own.untyped_storage().data_ptr()
    with _state.lock:
        _prune()
        at = next((i for i in range(len(_state.calls) - 1, -1, -1)
                   if _state.calls[i].ident.key() == key), None)
        if at is None:
            return  # not registered (a graph compiled without per_block, or retain_graph)
        done = _state.calls.pop(at)
        below = [c for c in _state.calls[:at] if c.device == done.device]
        todo = [s for s in below[-1].first if s.key() not in _state.prefetched] if below else []
    settle(done.device)
    for spec in todo:
        block = spec.alive()
        if block is None:
            continue
        nbytes = torch.empty((), dtype=spec.dtype).element_size() * _extent(spec.shape, spec.stride)
        host = block.buffer[:nbytes].view(spec.dtype).as_strided(spec.shape, spec.stride)
        out = ops.issue_copy_to_device(host, done.device, None)
        event = ops.take_pending(out)
        with _state.lock:
            _state.prefetched[spec.key()] = _Prefetched(out, event, spec)
        if _log is not None:
            _log.append(Step("prefetch", spec.call, _label(host)))


def take(host: Tensor, device: str, stride: Optional[List[int]]) -> Tensor | None:
    """The reload of ``host`` if the previous backward prefetched it (its completion
    event registered for ``offload::wait``), else ``None``; called by ``offload::h2d``."""
    if _state.carried:
        settle(_device(device))
    if not _state.prefetched:
        return None
    with _state.lock:
        got = _state.prefetched.pop(host.untyped_storage().data_ptr(), None)
    if got is None:
        return None
    spec, out = got.spec, got.out
    if (spec.alive() is None or stride is not None or host.storage_offset() != 0
            or tuple(host.shape) != spec.shape or tuple(host.stride()) != spec.stride
            or host.dtype != spec.dtype or out.device != _device(device)):
        _discard(got)
        return None
    ops.put_pending(out, got.done)
    if _log is not None:
        _log.append(Step("take", spec.call, _label(host)))
    return out


# -- what is left --------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Pending:
    calls: int
    """Forward calls whose backward has not run (their host copies alive)."""
    prefetched: int
    """Reloads issued for a backward that has not taken them yet."""
    prefetched_bytes: int
    carried: int
    """Releases left for a later graph to complete."""


def pending() -> Pending:
    """What the chain holds now, stale entries dropped first."""
    with _state.lock:
        _prune()
        return Pending(len(_state.calls), len(_state.prefetched),
                       sum(p.out.numel() * p.out.element_size() for p in _state.prefetched.values()),
                       len(_state.carried))


def clear() -> None:
    """Drop everything: carried releases are completed (compute waits for their copies),
    prefetched reloads dropped after compute waits for them, registered calls forgotten."""
    for device in {src.device for src, _ in _state.carried}:
        settle(device)
    with _state.lock:
        _state.calls.clear()
        dropped, _state.prefetched = list(_state.prefetched.values()), {}
    for got in dropped:
        _discard(got)


def _prune() -> None:
    """Drop calls and prefetches whose host copies are gone (lock held)."""
    _state.calls = [c for c in _state.calls if c.ident.alive() is not None]
    stale = [k for k, p in _state.prefetched.items() if p.spec.alive() is None]
    for k in stale:
        _discard(_state.prefetched.pop(k))


def _discard(got: _Prefetched) -> None:
    """Drop a prefetched reload nobody took: its memory may be reused by the compute
    stream only after its copy is done."""
    if got.done is not None:
        streams.current(got.out.device).wait_event(got.done)
    if _log is not None:
        _log.append(Step("discard", got.spec.call, _label(got.out)))
    log.debug("offload: a reload prefetched for the next block was not used (its backward "
              "did not run, or ran with other inputs); dropped")


def _device(device: str | torch.device) -> torch.device:
    d = torch.device(device)
    if d.type == "cuda" and d.index is None:
        d = torch.device("cuda", torch.cuda.current_device())
    return d


def _extent(shape: tuple, stride: tuple) -> int:
    """Elements a dense layout spans (0 for an empty tensor)."""
    if any(s == 0 for s in shape):
        return 0
    return 1 + sum((n - 1) * st for n, st in zip(shape, stride))


# -- the ops -------------------------------------------------------------------------

def _nothing(*args) -> None:
    return None


# A fragment of the ``offload`` namespace (``ops.py`` defines it). Each op writes one
# argument nominally (no data is written), which keeps it through Inductor's dead-code
# elimination on every supported torch, as ``release`` and ``wait`` do; the written
# arguments are host copies (``push_reloads``, ``prefetch_next``) or the host copy of a
# release (``release_later``), which no fused kernel reads.
_lib = torch.library.Library(ops.NAMESPACE, "FRAGMENT")
_OPS = (
    ("push_reloads(Tensor(a!) first, Tensor[] hosts, str device) -> ()", push_reloads),
    ("prefetch_next(Tensor(a!) own, Tensor? anchor) -> ()", prefetch_next),
    ("release_later(Tensor src, Tensor(a!) host, Tensor? anchor) -> ()", release_later),
)
ops.define(_lib, [(schema, kernel, _nothing, ()) for schema, kernel in _OPS])

PUSH_RELOADS = torch.ops.offload.push_reloads.default
PREFETCH_NEXT = torch.ops.offload.prefetch_next.default
RELEASE_LATER = torch.ops.offload.release_later.default
CHAIN_OPS = (PUSH_RELOADS, PREFETCH_NEXT, RELEASE_LATER)

for _op in CHAIN_OPS:
    torch.fx.node.has_side_effect(_op)
