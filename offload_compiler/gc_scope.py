"""Fewer garbage collections while the backend compiles.

Compiling allocates hundreds of thousands of objects that live on (FX nodes, fake
tensors, sympy expressions, min-cut's graphs, the planner's facts), and each full
collection they set off walks everything the process holds: Dynamo's and AOTAutograd's
state, the model, and the libraries imported. On an H100 host (Python 3.12, torch 2.11)
a cold first step of HF Llama ran 11 full collections (2.6 to 3.2 s), one of them
inside the offload partitioner (0.41 to 0.45 s); tuned as below, 9 (1.8 to 2.1 s), and
its first step at budget 0.5 took 27.2 and 26.7 s against 30.8 and 30.3 s untuned
(``benchmarks/RESULTS.md``, session 26). The partitioner had frozen the heap while it
planned since session 15, but only where nobody had frozen objects before, and on that
host something had (375 objects), so it did nothing there.

:func:`fewer_collections` holds, for the outermost of its scopes (they nest, and may
be entered on autograd's thread, where the backward compiles): the young generation
collected every :data:`YOUNG_THRESHOLD` allocations instead of Python's 700 (each
young collection that fills the older generations brings the next full one nearer),
and what existed when it began frozen (``gc.freeze``: no full collection walks it),
unless a caller had already frozen objects, which unfreezing would release. Reference
counting still frees acyclic garbage at once; cyclic garbage waits for a later
collection. On leaving, the thresholds are the caller's again and the freeze is gone.

:func:`collections_timed` counts and times the collections inside a scope: the
comparison harness reports them for each row's measured steps.
"""

from __future__ import annotations

import contextlib
import gc
import threading
import time
from typing import Iterator

#: Allocations between young-generation collections inside the scope (Python's default
#: is 700).
YOUNG_THRESHOLD = 14_000

_lock = threading.Lock()
_depth = 0
_restore: tuple[tuple[int, ...], bool] | None = None  # (thresholds, froze) of the outermost scope


@contextlib.contextmanager
def fewer_collections() -> Iterator[None]:
    """The collector tuned for a compile for the duration (see the module docstring);
    nothing changes where it is disabled (``gc.disable()``, or a young threshold of 0)."""
    global _depth, _restore
    with _lock:
        _depth += 1
        thresholds = gc.get_threshold()
        # A young threshold of 0 turns automatic collection off: left as the caller set it.
        if _depth == 1 and gc.isenabled() and thresholds[0] > 0:
            froze = gc.get_freeze_count() == 0
            if froze:
                gc.freeze()
            gc.set_threshold(max(thresholds[0], YOUNG_THRESHOLD), *thresholds[1:])
            _restore = (thresholds, froze)
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _restore is not None:
                thresholds, froze = _restore
                _restore = None
                gc.set_threshold(*thresholds)
                if froze:
                    gc.unfreeze()


class Collections:
    """Garbage collections counted by :func:`collections_timed`: how many ran, and their
    milliseconds of wall time."""

    __slots__ = ("count", "ms", "_start")

    def __init__(self) -> None:
        self.count, self.ms, self._start = 0, 0.0, None

    def __call__(self, phase: str, info: dict) -> None:  # a ``gc.callbacks`` entry
        if phase == "start":
            self._start = time.perf_counter()
        elif self._start is not None:
            self.count += 1
            self.ms += (time.perf_counter() - self._start) * 1e3
            self._start = None


@contextlib.contextmanager
def collections_timed() -> Iterator[Collections]:
    """Count and time every garbage collection that runs inside the scope (on any thread):
    a measured training step slowed by one shows it."""
    seen = Collections()
    gc.callbacks.append(seen)
    try:
        yield seen
    finally:
        gc.callbacks.remove(seen)
