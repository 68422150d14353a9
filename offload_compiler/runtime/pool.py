"""Host buffer pool, reused across training steps.

Pinning memory is slow (about 80 ms for 256 MB on an H100 host), so host buffers are
pooled: after warm-up a training step performs no pinned allocation. A block is
*checked out* while any tensor that views it is alive (the saved activation that
autograd holds between forward and backward) and goes back to the pool, *idle*, once
the last such tensor is gone. Liveness is read from the storage's reference count, so a
block comes back whatever holds the tensor (autograd, ``retain_graph=True``, a user);
the pool notices when it next looks (a request it has no idle block for, ``stats()``,
``empty()``).

Reuse is ordered on the GPU, not on the host: a block remembers the events of the
copies that touched it (its D2H write and every H2D read), and the next D2H into it
makes its stream wait on them first.

Blocks are sized in powers of two (at least 512 bytes) so that steps with slightly
different shapes reuse them; ``stats()`` reports reserved, checked-out and idle bytes.

Memory goes back (a block is *released*: pinned memory unpinned, host memory freed):

- past a bound on idle bytes, ``max_idle_bytes``, least recently used first, when the
  pool notices blocks idle. ``"auto"`` (default): the most bytes checked out at once
  (to within 1/16) or asked for by one prefill, at least 64 MiB; a step takes its own
  blocks again, so unchanging shapes release and pin nothing, changing shapes lose
  blocks of shapes no longer used. Set with ``$OFFLOAD_COMPILER_HOST_POOL_MAX_IDLE`` (``"auto"``, bytes,
  ``"256MiB"``), read at import, or ``host_pool().max_idle_bytes = ...``; below one
  step's host bytes every step pins memory again (logged once);
- all idle blocks once no compiled graph that may use the pool is alive: the backend
  registers each (:meth:`HostPool.register_graph`) with the model parameters it takes,
  since Dynamo keeps the graph itself cached after the model is deleted;
- all idle blocks now: :func:`empty_host_pool`. Checked-out blocks are never released:
  they come back, kept or released by the bound, when their tensors die.

Under CUDA graphs (``runtime/graph_slots.py``) a block may also be checked out while a
*token* lives (:attr:`HostBlock.owner`, a weak reference to the token's storage), or be
*held* by recorded graphs (:meth:`HostPool.take_idle`): a recorded copy reads or writes
the same host address on every replay, so a held block leaves circulation until
:meth:`HostPool.release_held` (when the graphs that recorded it are gone). While a graph
compiled for CUDA graphs is alive the idle bound is at least the most bytes checked out
at once: a recording takes the blocks its warm-up used, and pinned memory cannot be
allocated while a stream is being captured.

Pinned memory comes from torch's caching host allocator, which keeps freed pinned
memory; after releasing pinned blocks the pool empties that cache
(``torch.accelerator.empty_host_cache``), with any other pinned memory left there.
"""

from __future__ import annotations

import itertools
import logging
import numbers
import os
import threading
import weakref
from typing import Any, Callable, Sequence

import torch

from ..config import parse_nbytes
from .host_block import HostBlock, PoolStats, _default_allocator, _unpin_cached, block_nbytes, mib, new_block
from .prefill import Prefilling

__all__ = ["HostBlock", "HostPool", "PoolStats", "block_nbytes", "empty_host_pool", "host_pool", "mib"]

log = logging.getLogger(__name__)

#: Environment variable read at import: the bound on idle bytes (see the module docstring).
MAX_IDLE_ENV = "OFFLOAD_COMPILER_HOST_POOL_MAX_IDLE"
#: The least bound ``"auto"`` gives: small models whose shapes change keep their blocks.
AUTO_MIN_IDLE_BYTES = 64 << 20


def _check_max_idle(value: Any) -> int | None:
    """A bound on idle bytes: ``None`` or ``"auto"`` (auto), an integer, or a string
    such as ``"256MiB"``."""
    if isinstance(value, str):
        return parse_nbytes("max_idle_bytes", value)
    if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0):
        raise ValueError(f"max_idle_bytes={value!r} is not valid; give \"auto\" (or None), a "
                         "non-negative integer number of bytes, or a size such as \"256MiB\"")
    return None if value is None else int(value)


class HostPool(Prefilling):
    """Pool of host blocks, one per process (:func:`host_pool`); ``prefill.py`` pins ahead."""

    def __init__(self, limit_bytes: int | None = None, max_idle_bytes: int | str | None = None) -> None:
        self._lock = threading.Lock()
        self._free: dict[tuple[int, bool], list[HostBlock]] = {}
        self._in_use: dict[int, HostBlock] = {}
        self._by_ptr: dict[int, HostBlock] = {}
        self.limit_bytes = limit_bytes
        """Cap on reserved bytes (checked out and idle); past it a request fails."""
        self.allocator: Callable[[int, bool], torch.Tensor] = _default_allocator
        self._stats = PoolStats()
        self._max_idle = _check_max_idle(max_idle_bytes)
        self._checkouts = itertools.count(1)
        self._verified_in_use = 0
        self._graphs: set[int] = set()
        self._graphs_fixed: set[int] = set()  # graphs compiled for CUDA graphs
        self._held: dict[int, HostBlock] = {}
        self._had_graphs = False
        self._graph_ids = itertools.count()
        self._warned = False
        self._said_bound = False

    # -- checkout -----------------------------------------------------------------
    def acquire(self, like: torch.Tensor, *, pinned: bool,
                owner: Any = None) -> tuple[torch.Tensor, HostBlock] | None:
        """A host tensor with ``like``'s shape, strides and dtype, and its block.

        ``like`` must be dense and non-overlapping (the planner only offloads such); its
        storage offset is not carried. ``None`` if no block can be had: the caller then
        keeps the tensor on the device. ``owner`` (a ``StorageWeakRef``)
        keeps the block checked out while it lives, whoever holds the host tensor.
        """
        nbytes = like.numel() * like.element_size()
        size = block_nbytes(nbytes)
        self._wait_prefill()
        with self._lock:
            self._stats.acquires += 1
            if self._had_graphs and not self._graphs:  # a graph thought gone runs again
                self._had_graphs = False
            block = self._take_free(size, pinned)
            if block is None:
                block = self._allocate(size, pinned)
                if block is None:
                    return None
            self._note_peak(block.nbytes)  # before the block counts: it may look idle
            block.last_used = next(self._checkouts)
            block.owner = owner
            self._in_use[block.buffer.data_ptr()] = block
            self._stats.in_use_bytes += block.nbytes
            # The view is made under the lock: until it exists the block looks idle.
            host = block.view(like)
            self._trim()
        return host, block

    def take_idle(self, like: torch.Tensor, *, pinned: bool) -> tuple[torch.Tensor, HostBlock] | None:
        """An idle block for ``like``, taken out of circulation until :meth:`release_held`,
        and never a new allocation (a stream may be capturing: CUDA refuses to pin memory
        then and invalidates the capture). ``None`` when no idle block fits. The block's
        events are dropped: the caller orders its own copies (a capture starts after a
        device synchronize)."""
        size = block_nbytes(like.numel() * like.element_size())
        self._wait_prefill()
        with self._lock:
            block = self._take_free(size, pinned)
            if block is None:
                return None
            block.events, block.ready_event, block.owner = [], None, None
            self._held[block.buffer.data_ptr()] = block
            self._stats.held_blocks += 1
            self._stats.held_bytes += block.nbytes
            return block.view(like), block

    def release_held(self, blocks: list[HostBlock], *, blocking: bool = True) -> int:
        """Release blocks :meth:`take_idle` handed out (``blocks`` is emptied: the pool
        then holds the last reference); the caller has made sure no recorded graph may
        still copy into or out of them. Returns the bytes released. ``blocking=False``
        (from garbage collection) releases nothing and leaves ``blocks`` as they are if
        the pool's lock is held."""
        if not self._lock.acquire(blocking=blocking):
            return 0
        try:
            nbytes = 0
            while blocks:
                block = blocks.pop()
                if self._held.pop(block.buffer.data_ptr(), None) is None:
                    continue
                self._by_ptr.pop(block.buffer.data_ptr(), None)
                self._stats.held_blocks -= 1
                self._stats.held_bytes -= block.nbytes
                self._stats.reserved_bytes -= block.nbytes
                self._stats.released_blocks += 1
                self._stats.released_bytes += block.nbytes
                nbytes += block.nbytes
            block = None
            if nbytes:
                _unpin_cached()
        finally:
            self._lock.release()
        return nbytes

    def lookup(self, host: torch.Tensor) -> HostBlock | None:
        """The block behind a host tensor handed out by :meth:`acquire`, if any."""
        return self._by_ptr.get(host.untyped_storage().data_ptr())

    def _take_free(self, size: int, pinned: bool) -> HostBlock | None:
        free = self._free.get((size, pinned))
        if not free:
            self._reclaim()
            free = self._free.get((size, pinned))
        if not free:
            return None
        block = free.pop()
        self._stats.idle_bytes -= block.nbytes
        return block

    def _reclaim(self) -> None:
        """Move blocks no tensor views any more from checked out to idle."""
        for ptr, block in list(self._in_use.items()):
            if not block.in_use():
                block.owner = None
                del self._in_use[ptr]
                self._stats.in_use_bytes -= block.nbytes
                self._stats.idle_bytes += block.nbytes
                self._free.setdefault((block.nbytes, block.pinned), []).append(block)

    def _note_peak(self, nbytes: int) -> None:
        """Record the most bytes checked out at once. ``in_use_bytes`` may still count
        blocks whose tensors died (they are noticed lazily), so a new record is checked
        by looking at every block once it passes the last checked figure by 1/16."""
        now = self._stats.in_use_bytes + nbytes
        if now <= self._stats.peak_in_use_bytes:
            return
        if now > self._verified_in_use + self._verified_in_use // 16:
            self._reclaim()
            now = self._stats.in_use_bytes + nbytes
            self._verified_in_use = now
        self._stats.peak_in_use_bytes = max(self._stats.peak_in_use_bytes, now)

    def _allocate(self, size: int, pinned: bool) -> HostBlock | None:
        limit = self.limit_bytes
        if limit is not None and self._stats.reserved_bytes + size > limit:
            self._reclaim()
            self._release_idle(self._stats.reserved_bytes + size - limit)
            if self._stats.reserved_bytes + size > limit:
                self._fail(f"host pool limit of {mib(limit)} reached")
                return None
        try:
            buffer = self.allocator(size, pinned)
        except RuntimeError as err:  # pinning failed: out of page-locked memory
            self._fail(f"host allocation of {mib(size)} failed: {err}")
            return None
        return self._register(buffer, pinned)

    def _register(self, buffer: torch.Tensor, pinned: bool) -> HostBlock:
        """A host tensor just allocated, as a block of the pool (lock held; not yet in use)."""
        block = new_block(buffer, pinned)
        self._by_ptr[buffer.data_ptr()] = block
        self._stats.allocations += 1
        self._stats.reserved_bytes += block.nbytes
        return block

    def _fail(self, why: str) -> None:
        self._stats.failed_allocations += 1
        if not self._warned:
            self._warned = True
            log.warning("offload: %s; such tensors stay on the device (said once)", why)

    # -- giving memory back -------------------------------------------------------
    @property
    def max_idle_bytes(self) -> int | None:
        """Bound on idle bytes; ``None`` is ``"auto"`` (see the module docstring).
        Setting it (bytes, ``"auto"`` or ``None``) releases what is now past it."""
        return self._max_idle

    @max_idle_bytes.setter
    def max_idle_bytes(self, value: int | str | None) -> None:
        bound = _check_max_idle(value)
        with self._lock:
            self._max_idle = bound
            self._said_bound = False
            self._reclaim()
            self._trim()

    def _idle_bound(self) -> int:
        if self._had_graphs and not self._graphs:
            return 0
        if self._max_idle is not None:
            if self._graphs_fixed:  # a recording takes what its warm-up used: keep that
                return max(self._max_idle, self._stats.peak_in_use_bytes)
            return self._max_idle
        return max(AUTO_MIN_IDLE_BYTES, self._stats.peak_in_use_bytes, self._prefill_bytes)

    def _trim(self) -> None:
        """Release idle blocks past the bound, least recently used first."""
        bound, gone = self._idle_bound(), self._had_graphs and not self._graphs
        if self._stats.idle_bytes <= bound:
            return
        nbytes = self._release_idle(self._stats.idle_bytes - bound, wait=gone)
        if gone:
            self._stats.peak_in_use_bytes = self._verified_in_use = self._prefill_bytes = 0
            log.info("offload: host pool released %s of idle blocks: no compiled graph "
                     "using it is alive (%s still checked out)", mib(nbytes), mib(self._stats.in_use_bytes))
        elif self._max_idle is not None and bound < self._stats.peak_in_use_bytes and not self._said_bound:
            self._said_bound = True
            log.info("offload: host pool max_idle_bytes is %s, below the %s checked out at once: "
                     "blocks a step takes again are released and allocated again (said once)",
                     mib(bound), mib(self._stats.peak_in_use_bytes))
        else:
            log.debug("offload: host pool released %s of idle blocks past its bound of %s",
                      mib(nbytes), mib(bound))

    def _release_idle(self, nbytes: int, *, wait: bool = False) -> int:
        """Release idle blocks, least recently used first, until ``nbytes`` are released
        (all with ``nbytes`` past the idle total); returns the bytes released. ``wait``
        (off the step's path) waits for the copies that touched them, else torch's host
        allocator keeps their pinned memory until a later release after they finish."""
        if nbytes <= 0:
            return 0
        released, events = self._drop_idle(nbytes)
        if events is not None:  # pinned blocks, now without a reference here
            for event in events if wait else ():
                event.synchronize()
            _unpin_cached()
        return released

    def _drop_idle(self, nbytes: int) -> tuple[int, list | None]:
        idle = sorted((b for blocks in self._free.values() for b in blocks), key=lambda b: b.last_used)
        released, events = 0, None
        for block in idle:
            if released >= nbytes:
                break
            self._free[(block.nbytes, block.pinned)].remove(block)
            self._by_ptr.pop(block.buffer.data_ptr(), None)
            self._stats.reserved_bytes -= block.nbytes
            self._stats.idle_bytes -= block.nbytes
            self._stats.released_blocks += 1
            self._stats.released_bytes += block.nbytes
            released += block.nbytes
            if block.pinned:
                events = (events or []) + block.events + [e for e in (block.ready_event,) if e is not None]
        self._free = {key: blocks for key, blocks in self._free.items() if blocks}
        return released, events

    def empty(self) -> int:
        """Release every idle block now; returns the bytes released. Blocks checked out
        (tensors alive that view them) are left alone: they come back when those die."""
        with self._lock:
            self._reclaim()
            nbytes = self._release_idle(self._stats.idle_bytes, wait=True)
            in_use = self._stats.in_use_bytes
        log.debug("offload: host pool emptied: released %s; %s still checked out",
                 mib(nbytes), mib(in_use))
        return nbytes

    clear = empty

    def register_graph(self, compiled: Callable[..., Any], owners: Sequence[Any] = (), *,
                       fixed_buffers: bool = False) -> None:
        """Note that ``compiled`` (the function that runs one compiled graph) may use the
        pool while it and, if any are given, one of ``owners`` (the model's parameters
        the graph takes) are alive. Once no registered graph is, idle blocks are released,
        and blocks that come back later too, until a graph registers or runs again (a
        graph Dynamo keeps in its cache may run for another instance of the same
        model). An object that takes no weak reference counts as alive for good.
        ``fixed_buffers``: the graph was compiled for CUDA graphs (see the module
        docstring: the idle bound keeps what a recording needs while it lives)."""
        token = next(self._graph_ids)
        self._graphs.add(token)
        if fixed_buffers:
            self._graphs_fixed.add(token)
        self._had_graphs = True
        try:
            weakref.finalize(compiled, self._graph_gone, token).atexit = False
        except TypeError:
            log.debug("offload: host pool cannot see when %r dies; its idle blocks stay", compiled)
        left = [len(owners)]

        def owner_gone() -> None:
            left[0] -= 1
            if left[0] == 0:
                self._graph_gone(token)

        for owner in owners:
            weakref.finalize(owner, owner_gone).atexit = False

    def _graph_gone(self, token: int) -> None:
        # Runs from garbage collection, maybe inside this pool's own locked code on this
        # thread: never wait for the lock. If it is held, the next call releases.
        self._graphs.discard(token)
        self._graphs_fixed.discard(token)
        if self._graphs or not self._lock.acquire(blocking=False):
            return
        try:
            self._reclaim()
            self._trim()
        finally:
            self._lock.release()

    # -- inspection ---------------------------------------------------------------
    def stats(self) -> PoolStats:
        """A snapshot; looks at every block first (idle ones past the bound are released)."""
        with self._lock:
            self._reclaim()
            self._trim()
            return PoolStats(**{**vars(self._stats), "max_idle_bytes": self._idle_bound()})

    @property
    def allocations(self) -> int:
        """Host blocks allocated so far (a counter: looks at no block)."""
        return self._stats.allocations

    @property
    def changes(self) -> int:
        """Host blocks allocated or released so far (a counter). Either can stop a step:
        pinning stops the host; giving it back (``cudaFreeHost``) waits for the device."""
        return self._stats.allocations + self._stats.released_blocks


def _pool_from_env() -> HostPool:
    text = os.environ.get(MAX_IDLE_ENV)
    return HostPool(max_idle_bytes=None if text is None else parse_nbytes(MAX_IDLE_ENV, text))


_pool = _pool_from_env()


def host_pool() -> HostPool:
    """The process-wide host pool shared by every compiled graph."""
    return _pool


def empty_host_pool() -> int:
    """Release every idle block of the process-wide pool now (blocks in use stay);
    returns the bytes released."""
    return _pool.empty()
