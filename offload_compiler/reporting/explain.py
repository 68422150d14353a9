"""``explain``: trace and plan a model without training it, and report the decisions.

    report = offload_compiler.explain(model, x, memory_budget=0.5)
    print(report)                       # decision table and summary per graph
    report.decisions[0]["decision"]     # "keep", "offload" or "recompute"
    report.predicted["step_ms"]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from ..backend import make_backend
from . import tables as fmt
from .records import GraphPlan, Predictions


@dataclass
class GraphReport:
    graph_id: int
    decisions: list[dict[str, Any]]
    predicted: dict[str, float]
    summary: str
    table: str
    note: str = ""


@dataclass
class Report:
    """What the backend would do with a model: one entry per compiled graph."""

    graphs: list[GraphReport] = field(default_factory=list)

    @property
    def decisions(self) -> list[dict[str, Any]]:
        """Every graph's decision records, in order."""
        return [d for g in self.graphs for d in g.decisions]

    @property
    def predicted(self) -> dict[str, float]:
        """Predictions summed over graphs (each graph's are in ``graphs[i].predicted``)."""
        return Predictions.summed([g.predicted for g in self.graphs if g.predicted])

    def __str__(self) -> str:
        if not self.graphs:
            return "offload_compiler: no graph needed a backward pass; nothing to decide"
        parts = []
        for g in self.graphs:
            parts += [g.summary, "", g.table, ""]
        return "\n".join(parts).rstrip()


def report_of(plans: list[GraphPlan]) -> Report:
    return Report([GraphReport(p.graph_id, fmt.decision_dicts(p), p.predicted.as_dict() if p.predicted else {},
                               fmt.summary_text(p), fmt.decision_table(p), p.note) for p in plans])


def explain(model: torch.nn.Module, *args: Any, **options: Any) -> Report:
    """Compile ``model`` with the offload backend (``options`` as for ``torch.compile``),
    run one forward on ``args`` so the graphs are captured and planned, and report.

    No backward runs and no parameter changes. The forward does run, on the model's
    device, as compilation needs it.
    """
    backend = make_backend(**options)
    compiled = torch.compile(model, backend=backend)
    with torch.enable_grad():
        compiled(*args)
    return report_of(backend.plans)
