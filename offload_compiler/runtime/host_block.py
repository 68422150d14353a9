"""A host block of the pool and the pool's counters (``pool.py`` decides when blocks are
taken, given back and released).

Blocks are sized in powers of two, at least 512 bytes, so that steps with slightly
different shapes reuse them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from .streams import D2H

_MIN_BLOCK_BYTES = 512


def block_nbytes(nbytes: int) -> int:
    """The size class of a request: the next power of two, at least 512 bytes."""
    n = max(int(nbytes), _MIN_BLOCK_BYTES)
    return 1 << (n - 1).bit_length()


def mib(nbytes: int) -> str:
    return f"{nbytes / 2**20:.1f} MiB"


@dataclass(eq=False)  # one block is one allocation: compared by identity, never by its bytes
class HostBlock:
    buffer: torch.Tensor
    """Flat ``uint8`` host tensor backing the block."""
    pinned: bool
    storage: torch.UntypedStorage
    idle_uses: int
    """Reference count of the storage while only the pool holds it (the buffer, the
    storage object and the typed views of :meth:`view`)."""
    events: list = field(default_factory=list)
    """CUDA events of copies that touched the block since it was last handed out."""
    ready_event: object | None = None
    """Event recorded when the D2H copy into this block finished (``None`` on CPU)."""
    last_used: int = 0
    """When it was last checked out (the pool's count of checkouts): idle blocks past the
    bound are released least recently used first."""
    owner: Any = None
    """With token transfers (CUDA graphs): a ``StorageWeakRef`` of the token whose value
    the block holds; the block stays checked out while the token lives."""
    nbytes: int = 0
    """The block's size in bytes (the buffer's length, read on every checkout)."""
    typed: dict = field(default_factory=dict)
    """The buffer seen as each dtype it has held, kept for :meth:`view`."""
    marks: dict = field(default_factory=dict)
    """The block's own completion events, by direction and device (:meth:`mark`)."""

    def in_use(self) -> bool:
        if self.owner is not None and not self.owner.expired():
            return True
        return torch._C._storage_Use_Count(self.storage._cdata) > self.idle_uses

    def view(self, like: torch.Tensor) -> torch.Tensor:
        """The block seen as a tensor with ``like``'s shape, strides and dtype (``like`` is
        dense: its elements lie in the block's first bytes). One call on every ``d2h``
        after the first of a dtype: the buffer seen as that dtype is kept on the block
        (a use of the storage the pool's own, counted in :attr:`idle_uses`)."""
        typed = self.typed.get(like.dtype)
        if typed is None:
            typed = self.typed[like.dtype] = self.buffer.view(like.dtype)
            self.idle_uses += 1
        return typed.as_strided(like.size(), like.stride())

    def mark(self, stream: Any, direction: str) -> Any:
        """Record the block's own event of ``direction`` (``"d2h"``, ``"h2d"``) on
        ``stream`` and return it: one event per block, direction and device, recorded
        again by each copy instead of a new one made (with the skipped wait of
        ``ops._d2h_cuda``, a ``d2h`` and ``release`` pair took an H200's host 27.2 us
        against 29.9, ``benchmarks/RESULTS.md``, session 40). Safe to reuse: a wait takes
        the event's last record at the time it is queued, and a later record on the
        same stream is a later point of it, so a wait queued after it waits at most
        longer, never less."""
        key = (direction, stream.device_index)
        event = self.marks.get(key)
        if event is None:
            event = self.marks[key] = torch.cuda.Event()
        event.record(stream)
        return event

    def filled_on(self, stream: Any) -> bool:
        """Whether the copy that last filled the block was issued on ``stream``: its
        :attr:`ready_event` is the block's own D2H event of ``stream``'s device,
        which only that device's D2H stream records."""
        ready = self.ready_event
        return ready is not None and self.marks.get((D2H, stream.device_index)) is ready


def new_block(buffer: torch.Tensor, pinned: bool) -> HostBlock:
    """The block of a freshly allocated flat ``uint8`` host tensor, only the pool holding it."""
    storage = buffer.untyped_storage()
    block = HostBlock(buffer=buffer, pinned=pinned, storage=storage, idle_uses=0, nbytes=buffer.numel())
    block.idle_uses = torch._C._storage_Use_Count(storage._cdata)
    return block


def _default_allocator(nbytes: int, pinned: bool) -> torch.Tensor:
    return torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned)


def _unpin_cached() -> None:
    """Give torch's cached, unused pinned host memory back to the system."""
    if not torch.cuda.is_initialized():
        return
    empty = getattr(getattr(torch, "accelerator", None), "empty_host_cache", None)
    empty = empty or getattr(torch._C, "_host_emptyCache", None)
    if empty is not None:
        empty()


@dataclass
class PoolStats:
    allocations: int = 0
    """Host blocks allocated (pinned ones when running on a GPU)."""
    prefilled_blocks: int = 0
    """Of those, blocks allocated ahead of a plan's first call, while it compiled (``prefill.py``)."""
    reserved_bytes: int = 0
    """Bytes of all blocks the pool holds, checked out or idle."""
    in_use_bytes: int = 0
    """Bytes of blocks checked out (exact in ``stats()``, which looks at every block)."""
    idle_bytes: int = 0
    """Bytes of blocks free for reuse."""
    peak_in_use_bytes: int = 0
    """The most bytes checked out at once since no graph was alive (to within 1/16)."""
    max_idle_bytes: int = 0
    """The bound on idle bytes now in force (``"auto"`` resolved; 0 with no graph alive)."""
    released_blocks: int = 0
    """Blocks given back to the system so far."""
    released_bytes: int = 0
    failed_allocations: int = 0
    """Allocations that failed or were refused by the limit (the tensor stayed put)."""
    acquires: int = 0
    held_blocks: int = 0
    """Blocks held by recorded CUDA graphs (out of circulation until those graphs are gone)."""
    held_bytes: int = 0


