"""Pinning a plan's host blocks while it compiles (``offload_compiler/runtime/prefill.py``).

CPU: the pool's allocator is replaced by one that records what it allocates, on which
thread and when, so the ordering is observed, not timed.
"""

from __future__ import annotations

import threading
import time

import torch

from offload_compiler import backend as backend_module
from offload_compiler.runtime.pool import HostPool

KIB = 1 << 10


class Recording:
    """An allocator that records ``(thread, nbytes)``; a test may set ``delay_s`` (seconds
    per block) and ``fail_after`` (blocks allocated before it raises)."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []
        self.delay_s: float = 0.0
        self.fail_after: int | None = None

    def __call__(self, nbytes: int, pinned: bool) -> torch.Tensor:
        if self.fail_after is not None and len(self.calls) >= self.fail_after:
            raise RuntimeError("CUDA error: out of memory (pinned)")
        time.sleep(self.delay_s)
        self.calls.append((threading.get_ident(), nbytes))
        return torch.empty(nbytes, dtype=torch.uint8)


def _pool(**kwargs) -> tuple[HostPool, Recording]:
    pool = HostPool(**kwargs)
    pool.allocator = Recording()
    return pool, pool.allocator


def _like(nbytes: int) -> torch.Tensor:
    return torch.empty(nbytes, dtype=torch.uint8, device="meta")


def test_a_prefill_pins_the_missing_blocks_off_the_calling_thread_and_the_step_takes_them():
    pool, alloc = _pool()
    assert pool.prefill([3 * KIB, 16 * KIB, 16 * KIB], pinned=True, wait=True) == 3
    assert {t for t, _ in alloc.calls} != {threading.get_ident()}
    assert sorted(n for _, n in alloc.calls) == [4 * KIB, 16 * KIB, 16 * KIB]  # size classes
    stats = pool.stats()  # looks at every block and trims: the prefilled blocks stay
    assert stats.prefilled_blocks == stats.allocations == 3 and stats.idle_bytes == 36 * KIB
    held = [pool.acquire(_like(n), pinned=True) for n in (3 * KIB, 16 * KIB, 16 * KIB)]
    assert all(h is not None for h in held) and len(alloc.calls) == 3  # nothing pinned in the step
    # A second prefill of the same plan (a recompile) allocates nothing: the blocks are
    # the pool's, checked out or idle.
    assert pool.prefill([3 * KIB, 16 * KIB, 16 * KIB], pinned=True, wait=True) == 0
    del held
    assert pool.prefill([16 * KIB] * 3, pinned=True, wait=True) == 1
    assert pool.prefill([16 * KIB], pinned=False, wait=True) == 1  # unpinned blocks are apart


def test_a_checkout_waits_for_a_prefill_under_way_and_never_pins_beside_it():
    """The prefill is still pinning (each block takes 50 ms) when the step's first copy
    asks for a block: the checkout waits for it, takes a prefilled block and pins none
    itself, so no pinning overlaps a step (or a CUDA graph capture)."""
    pool, alloc = _pool()
    alloc.delay_s = 0.05
    assert pool.prefill([8 * KIB] * 4, pinned=True) == 4  # returns at once
    got = pool.acquire(_like(8 * KIB), pinned=True)
    assert got is not None and len(alloc.calls) == 4
    assert threading.get_ident() not in {t for t, _ in alloc.calls}
    assert pool.stats().allocations == 4
    assert pool.take_idle(_like(8 * KIB), pinned=True) is not None and len(alloc.calls) == 4


def test_a_prefill_stays_within_the_pools_limits():
    pool, alloc = _pool(limit_bytes=40 * KIB)
    assert pool.prefill([16 * KIB] * 3, pinned=True, wait=True) == 2  # a third is past the limit
    pool, alloc = _pool(max_idle_bytes=20 * KIB)
    assert pool.prefill([16 * KIB, 4 * KIB, 8 * KIB], pinned=True, wait=True) == 2
    assert sorted(n for _, n in alloc.calls) == [4 * KIB, 16 * KIB]
    assert pool.stats().released_blocks == 0


def test_a_failed_allocation_ends_the_prefill_quietly_and_the_step_decides():
    pool, alloc = _pool()
    alloc.fail_after = 1
    assert pool.prefill([8 * KIB] * 3, pinned=True, wait=True) == 3
    stats = pool.stats()
    assert stats.prefilled_blocks == 1 and stats.failed_allocations == 0  # no warning yet
    alloc.fail_after = None
    held = [pool.acquire(_like(8 * KIB), pinned=True) for _ in range(3)]
    assert all(held) and pool.stats().allocations == 3


def test_the_prefill_bound_goes_with_the_last_graph():
    """Prefilled blocks are kept while a graph that may use them lives, and released with
    the rest when none does."""
    pool, alloc = _pool()

    def graph():
        return None

    pool.register_graph(graph)
    pool.prefill([2 << 20] * 64, pinned=True, wait=True)  # 128 MiB: past the least bound
    assert pool.stats().idle_bytes == 128 << 20
    del graph
    stats = pool.stats()
    assert stats.idle_bytes == 0 and stats.released_blocks == 64


def test_the_backend_prefills_a_plan_on_a_cuda_device_only(monkeypatch):
    asked = []

    class Pool:
        def prefill(self, sizes, *, pinned):
            asked.append((list(sizes), pinned))

    class Decision:
        def __init__(self, nbytes):
            self.nbytes = nbytes

    class Plan:
        offloaded = [Decision(1000), Decision(5 * KIB)]

    monkeypatch.setattr(backend_module, "host_pool", lambda: Pool())
    plans = []
    backend_module._Collect(plans, torch.device("cuda", 0))(Plan())
    backend_module._Collect(plans, torch.device("cpu"))(Plan())
    backend_module._Collect(plans, None)(Plan())
    assert asked == [([1000, 5 * KIB], True)] and len(plans) == 3
