"""``explain``: trace and plan a model without training it, and report the decisions.

    report = offload_compiler.explain(model, x, memory_budget=0.5)
    print(report)                       # decision table and summary per graph
    report.decisions[0]["decision"]     # "keep", "offload" or "recompute"
    report.predicted["step_ms"]
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Iterator

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

    No backward runs. The forward does run once, on the model's device, as compilation
    needs it; afterwards every parameter and buffer (BatchNorm's running statistics and
    ``num_batches_tracked``, for example) and the CPU and CUDA random number generators
    are as they were before the call, even if the forward raised. While it runs,
    ``explain`` holds a copy of the parameters and buffers in host memory.
    """
    backend = make_backend(**options)
    compiled = torch.compile(model, backend=backend)
    with _state_kept(model), torch.enable_grad():
        compiled(*args)
    return report_of(backend.plans)


@contextlib.contextmanager
def _state_kept(model: torch.nn.Module) -> Iterator[None]:
    """Restore, on exit, the values of the model's parameters and buffers (in place: the
    tensors stay the model's own) and the CPU and CUDA generator states."""
    tensors = list({id(t): t for t in (*model.parameters(), *model.buffers())}.values())
    saved = [(t, t._version, t.detach().to("cpu", copy=True)) for t in tensors]
    # A forward on CPU tensors does not touch CUDA's generators; one on CUDA tensors
    # finds CUDA initialized already (the model or its inputs live there).
    cuda = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
    with torch.random.fork_rng(devices=cuda, device_type="cuda"):
        try:
            yield
        finally:
            with torch.no_grad():
                for t, version, copy in saved:
                    # Unchanged tensors are left alone, their version counters too (a
                    # graph the caller has yet to run backward through stays valid).
                    if t._version != version or not _same_bits(t.detach().cpu(), copy):
                        t.copy_(copy)


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equality (NaN equals itself, -0.0 differs from 0.0). Tensors that are not
    strided (sparse buffers) count as changed: writing them back is always right."""
    if a.layout != torch.strided or b.layout != torch.strided or a.dtype != b.dtype or a.shape != b.shape:
        return False
    as_int = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}.get(a.element_size())
    if as_int is None or a.is_complex():
        return torch.equal(a, b)
    return torch.equal(a.view(as_int), b.view(as_int))
