"""Pinning a plan's host blocks while its graph compiles.

Pinning host memory is slow: on an H100 host about 32 ms per 64 MiB block, 0.9 s for
the 28 blocks of the example GPT's ``h100`` preset at ``"auto"`` (a profile of its first
step, ``benchmarks/RESULTS.md``, session 13). Left to the first step, it happens on the
step's path: each ``d2h`` of the first forward waits for its block to be pinned while
the GPU idles. The plan says which blocks one call checks out as soon as the
partitioner has made it, and Inductor then compiles the forward for seconds. So the
backend hands the plan's sizes to :meth:`Prefilling.prefill`, which pins the blocks the
pool lacks on a background thread meanwhile and adds them to the pool as idle blocks;
the idle bound keeps them as it keeps the blocks of a step.

Every checkout (``HostPool.acquire``, ``HostPool.take_idle``) first waits for a prefill
under way, so no block is pinned while a step runs, nor while a stream is captured for a
CUDA graph (CUDA refuses to pin memory then). A failed allocation ends the prefill
quietly; the step then allocates what is missing, or keeps the tensor on the device, as
without it.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from typing import TYPE_CHECKING, Sequence

from .host_block import block_nbytes, mib

if TYPE_CHECKING:
    from .pool import HostPool

log = logging.getLogger(__name__)


class Prefilling:
    """The prefill half of ``HostPool`` (a mixin: it works on the pool's blocks under
    the pool's lock)."""

    _prefilling: threading.Thread | None = None
    _prefill_bytes: int = 0
    """The bytes of the largest prefill asked for since no graph was alive: kept idle."""

    def prefill(self: HostPool, sizes: Sequence[int], *, pinned: bool, wait: bool = False) -> int:
        """Allocate, on a background thread, blocks for host tensors of ``sizes`` bytes
        (those one call of a plan checks out) that the pool does not hold, in use or idle;
        returns how many it allocates. ``wait``: return once they are allocated. Stays
        within ``limit_bytes`` and an explicit ``max_idle_bytes``."""
        self._wait_prefill()
        wanted = sorted((block_nbytes(n) for n in sizes), reverse=True)
        with self._lock:
            self._reclaim()
            have = Counter(b.nbytes for ptr, b in self._by_ptr.items()
                           if b.pinned == pinned and ptr not in self._held)
            missing = []
            for size in wanted:
                if have[size] > 0:
                    have[size] -= 1
                else:
                    missing.append(size)
            self._prefill_bytes = max(self._prefill_bytes, sum(wanted))
            room = [self.limit_bytes - self._stats.reserved_bytes] if self.limit_bytes is not None else []
            if self._max_idle is not None:
                room.append(self._max_idle - self._stats.idle_bytes)
            if room:
                left, kept = min(room), []
                for size in missing:
                    if size <= left:
                        kept.append(size)
                        left -= size
                missing = kept
        if not missing:
            return 0
        log.debug("offload: host pool: pinning %d blocks (%s) while the graph compiles",
                  len(missing), mib(sum(missing)))
        thread = threading.Thread(target=self._pin_ahead, args=(missing, pinned),
                                  name="offload-host-prefill", daemon=True)
        self._prefilling = thread
        thread.start()
        if wait:
            self._wait_prefill()
        return len(missing)

    def _pin_ahead(self: HostPool, sizes: list[int], pinned: bool) -> None:
        for size in sizes:
            try:
                buffer = self.allocator(size, pinned)
            except RuntimeError as err:  # out of page-locked memory: the step decides
                log.debug("offload: host pool: prefill stopped, allocating %s failed: %s", mib(size), err)
                return
            with self._lock:
                block = self._register(buffer, pinned)
                self._free.setdefault((size, pinned), []).append(block)
                self._stats.prefilled_blocks += 1
                self._stats.idle_bytes += size

    def _wait_prefill(self) -> None:
        """Wait for a prefill under way (never called with the pool's lock held)."""
        thread = self._prefilling
        if thread is not None:
            thread.join()
            self._prefilling = None
