"""The memory budget, settled once into a typed value.

``OffloadConfig.memory_budget`` is validated where it is given (``config.py``); the
planner settles it against the graph's baseline activation peak here, and nothing
downstream looks at the option again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


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
