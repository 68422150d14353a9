"""The memory budget, settled once into a typed value.

``OffloadConfig.memory_budget`` is validated where it is given (``config.py``); the
planner settles it against the graph's baseline activation peak here, and nothing
downstream looks at the option again. ``"auto"`` searches over fixed budgets with
:func:`interpolate_budgets`, in the solver's model and on realised partitions.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable

from ..nbytes import nbytes_text

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Budget:
    """A bound on the activation peak of one graph."""

    auto: bool
    """``"auto"``: the least peak whose predicted overhead stays within ``max_overhead``."""
    nbytes: int | None
    """The bound in bytes; ``None`` with ``auto``."""

    @classmethod
    def settle(cls, memory_budget: Any, baseline_peak_bytes: int) -> "Budget":
        """From the option: ``"auto"``; a float fraction of ``baseline_peak_bytes`` (the
        activation peak with nothing moved); or an int byte count."""
        if memory_budget == "auto":
            return cls(auto=True, nbytes=None)
        if isinstance(memory_budget, float):
            return cls(auto=False, nbytes=int(memory_budget * baseline_peak_bytes))
        return cls(auto=False, nbytes=int(memory_budget))

    def describe(self) -> str:
        """In words, for logs."""
        if self.auto:
            return 'memory_budget="auto"'
        return f"a budget of {self.nbytes / 2**20:.1f} MiB"


def warn_if_missed(plan: Any, memory_budget: Any) -> None:
    """One WARNING for a plan (``GraphPlan``) whose predicted activation peak is over
    the fixed budget it was made for: the plan is the best effort, and training goes on
    with it. Said wherever the plan is reported (planned, replayed or cached)."""
    p = plan.predicted
    if p is None or p.budget_bytes < 0 or p.activation_peak_bytes <= p.budget_bytes:
        return
    log.warning(
        "offload: graph %d: the memory budget is not reachable: memory_budget=%r asks for "
        "an activation peak of at most %s, the best plan found holds %s (%s with nothing "
        "moved); training goes on with it. Give a larger memory_budget, or see each "
        "activation's reason with TORCH_LOGS=+offload", plan.graph_id, memory_budget,
        nbytes_text(p.budget_bytes), nbytes_text(p.activation_peak_bytes),
        nbytes_text(p.baseline_activation_peak_bytes))


def interpolate_budgets(lo: int, hi: int, steps: int, fits: Callable[[int], int | None],
                        points: list[tuple[int, float]], limit_ms: float, resolution: int) -> None:
    """Search budgets between ``lo`` (missed) and ``hi`` (met) for the least peak whose
    step stays within ``limit_ms``, as a bisection would, but trying where the step is
    expected to reach the limit: on the line through the plans tried (``points``,
    (peak, step) of each, which ``fits`` extends) nearest the limit on either side, or,
    with none over it yet, the line through the two lowest peaks within it. Each try is
    kept half the resolution from the ends of the range (so the range shrinks by that at
    least), and a bisection's middle is tried where the line says nothing (a step that
    does not rise as the peak falls). At most ``steps`` tries; stops once ``hi - lo <=
    resolution``. ``fits(budget)`` returns the new upper bound when the plan for
    ``budget`` meets the limit, ``None`` when not. Used by ``"auto"`` in the solver's
    model (``solver.solve``) and on realised partitions (``search``): on HF Llama planned
    on a CPU a bisection spent four tries over the limit below one within it; the step
    is close to linear in the peak there, so the line's first try lands near the answer."""
    for _ in range(steps):
        if hi - lo <= max(resolution, 1):
            break
        within = sorted(p for p in points if p[1] <= limit_ms)
        over = [p for p in points if p[1] > limit_ms]
        mid = (lo + hi) // 2
        a, b = None, None
        if over and within:
            a, b = max(over), within[0]
        elif len(within) >= 2:
            a, b = within[0], within[1]
        guess = mid
        if a is not None and a[0] != b[0]:
            slope = (b[1] - a[1]) / (b[0] - a[0])  # ms per byte: negative as the peak rises
            if slope < 0:
                guess = int(b[0] + (limit_ms - b[1]) / slope)
        margin = max(resolution // 2, 1)
        budget = min(max(guess, lo + margin), hi - margin)
        upper = fits(budget)
        if upper is None:
            lo = budget
        else:
            hi = upper


def edge_budget(lo: int, hi: int, steps: int, *, all_miss: bool) -> int:
    """The last budget :func:`.solver.bisect_budgets` tries between ``lo`` (missed) and
    ``hi`` (met) when every try misses (``all_miss``: the budgets climb towards ``hi``)
    or every try meets at the budget it was given (they fall towards ``lo``)."""
    mid = hi
    for _ in range(steps):
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if all_miss else (lo, mid)
    return mid
