"""The memory budget, settled once into a typed value.

``OffloadConfig.memory_budget`` is validated where it is given (``config.py``); the
planner settles it against the graph's baseline activation peak here, and nothing
downstream looks at the option again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

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
