"""Host buffer pool, reused across training steps.

Pinning memory is slow (about 80 ms for 256 MB on an H100 host), so host buffers are
pooled: after warm-up a training step performs no pinned allocation. A block is
*checked out* while any tensor that views it is alive (the saved activation that
autograd holds between forward and backward) and goes back to the pool once the last
such tensor is gone. Liveness is read from the storage's reference count, so a block
comes back whatever holds the tensor (autograd, ``retain_graph=True``, a user).

Reuse is ordered on the GPU, not on the host: a block remembers the events of the
copies that touched it (its D2H write and every H2D read), and the next D2H into it
makes its stream wait on them first.

Blocks are sized in powers of two (at least 512 bytes) so that steps with slightly
different shapes reuse them; ``stats()`` reports reserved and checked-out bytes.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Callable

import torch

log = logging.getLogger(__name__)

_MIN_BLOCK_BYTES = 512


def block_nbytes(nbytes: int) -> int:
    """The size class of a request: the next power of two, at least 512 bytes."""
    n = max(int(nbytes), _MIN_BLOCK_BYTES)
    return 1 << (n - 1).bit_length()


@dataclass
class HostBlock:
    buffer: torch.Tensor
    """Flat ``uint8`` host tensor backing the block."""
    pinned: bool
    storage: torch.UntypedStorage
    idle_uses: int
    """Reference count of the storage while only the pool holds it."""
    events: list = field(default_factory=list)
    """CUDA events of copies that touched the block since it was last handed out."""
    ready_event: object | None = None
    """Event recorded when the D2H copy into this block finished (``None`` on CPU)."""

    @property
    def nbytes(self) -> int:
        return self.buffer.numel()

    def in_use(self) -> bool:
        return torch._C._storage_Use_Count(self.storage._cdata) > self.idle_uses


def _default_allocator(nbytes: int, pinned: bool) -> torch.Tensor:
    return torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned)


@dataclass
class PoolStats:
    allocations: int = 0
    """Host blocks allocated (pinned ones when running on a GPU)."""
    reserved_bytes: int = 0
    """Bytes of all blocks the pool holds, free or checked out."""
    in_use_bytes: int = 0
    """Bytes of blocks checked out right now (updated on each acquire)."""
    failed_allocations: int = 0
    """Allocations that failed or were refused by the limit (the tensor stayed put)."""
    acquires: int = 0


class HostPool:
    """Pool of host blocks; one per process (see :func:`host_pool`)."""

    def __init__(self, limit_bytes: int | None = None) -> None:
        self._lock = threading.Lock()
        self._free: dict[tuple[int, bool], list[HostBlock]] = {}
        self._in_use: dict[int, HostBlock] = {}
        self._by_ptr: dict[int, HostBlock] = {}
        self.limit_bytes = limit_bytes
        self.allocator: Callable[[int, bool], torch.Tensor] = _default_allocator
        self._stats = PoolStats()
        self._warned = False

    # -- checkout -----------------------------------------------------------------
    def acquire(self, like: torch.Tensor, *, pinned: bool) -> tuple[torch.Tensor, HostBlock] | None:
        """A host tensor with ``like``'s shape, strides and dtype, and its block.

        ``like`` must be dense and non-overlapping with storage offset 0 (the planner
        only offloads such tensors). Returns ``None`` if no block can be had; the
        caller then keeps the tensor on the device.
        """
        nbytes = like.numel() * like.element_size()
        size = block_nbytes(nbytes)
        with self._lock:
            self._stats.acquires += 1
            block = self._take_free(size, pinned)
            if block is None:
                block = self._allocate(size, pinned)
                if block is None:
                    return None
            self._in_use[block.buffer.data_ptr()] = block
            self._stats.in_use_bytes += block.nbytes
        flat = block.buffer[:nbytes].view(like.dtype)
        host = flat.as_strided(like.size(), like.stride())
        return host, block

    def lookup(self, host: torch.Tensor) -> HostBlock | None:
        """The block behind a host tensor handed out by :meth:`acquire`, if any."""
        return self._by_ptr.get(host.untyped_storage().data_ptr())

    def _take_free(self, size: int, pinned: bool) -> HostBlock | None:
        free = self._free.get((size, pinned))
        if not free:
            self._reclaim()
            free = self._free.get((size, pinned))
        return free.pop() if free else None

    def _reclaim(self) -> None:
        for ptr, block in list(self._in_use.items()):
            if not block.in_use():
                del self._in_use[ptr]
                self._stats.in_use_bytes -= block.nbytes
                self._free.setdefault((block.nbytes, block.pinned), []).append(block)

    def _allocate(self, size: int, pinned: bool) -> HostBlock | None:
        limit = self.limit_bytes
        if limit is not None and self._stats.reserved_bytes + size > limit:
            self._reclaim()
            self._release_free_blocks(size)
            if self._stats.reserved_bytes + size > limit:
                self._fail(f"host pool limit of {limit} bytes reached")
                return None
        try:
            buffer = self.allocator(size, pinned)
        except RuntimeError as err:  # pinning failed: out of page-locked memory
            self._fail(f"host allocation of {size} bytes failed: {err}")
            return None
        storage = buffer.untyped_storage()
        block = HostBlock(buffer=buffer, pinned=pinned, storage=storage, idle_uses=0)
        block.idle_uses = torch._C._storage_Use_Count(storage._cdata)
        self._by_ptr[buffer.data_ptr()] = block
        self._stats.allocations += 1
        self._stats.reserved_bytes += size
        return block

    def _release_free_blocks(self, needed: int) -> None:
        """Drop free blocks of other sizes until ``needed`` more bytes fit the limit."""
        assert self.limit_bytes is not None
        for key in sorted(self._free, reverse=True):
            blocks = self._free[key]
            while blocks and self._stats.reserved_bytes + needed > self.limit_bytes:
                block = blocks.pop()
                self._by_ptr.pop(block.buffer.data_ptr(), None)
                self._stats.reserved_bytes -= block.nbytes

    def _fail(self, why: str) -> None:
        self._stats.failed_allocations += 1
        if not self._warned:
            self._warned = True
            log.warning("offload: %s; such tensors stay on the device (said once)", why)

    # -- inspection ---------------------------------------------------------------
    def stats(self) -> PoolStats:
        with self._lock:
            self._reclaim()
            return PoolStats(**vars(self._stats))

    def clear(self) -> None:
        """Forget every free block (checked-out ones stay valid until released)."""
        with self._lock:
            self._reclaim()
            for blocks in self._free.values():
                for block in blocks:
                    self._by_ptr.pop(block.buffer.data_ptr(), None)
                    self._stats.reserved_bytes -= block.nbytes
            self._free.clear()


_pool = HostPool()


def host_pool() -> HostPool:
    """The process-wide host pool shared by every compiled graph."""
    return _pool
