"""Decisions: which saved activations to offload, with a reason for each.

Until the cost-model planner exists, the choice is a policy:

- ``"all"``: every eligible activation, in forward order, while the graph's host bytes
  stay within ``max_host_bytes``;
- ``"none"``: nothing (the inner compiler's result, unchanged).
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass, field
from typing import Any

from passes import Candidate, Offload

from .config import OffloadConfig

log = logging.getLogger(__name__)


class Decision(str, enum.Enum):
    KEEP = "keep"
    OFFLOAD = "offload"
    RECOMPUTE = "recompute"


@dataclass(frozen=True)
class DecisionRecord:
    name: str
    producer: str
    shape: tuple
    dtype: str
    device: str
    nbytes: int
    decision: Decision
    reason: str


@dataclass
class GraphPlan:
    """What the backend decided for one compiled graph."""

    graph_id: int
    decisions: list[DecisionRecord] = field(default_factory=list)
    fw_graph: Any = field(default=None, repr=False)
    """The rewritten forward ``fx.GraphModule`` (before the inner compiler)."""
    bw_graph: Any = field(default=None, repr=False)
    """The rewritten backward ``fx.GraphModule`` (before the inner compiler)."""
    predicted: dict[str, float] = field(default_factory=dict)
    """Planner predictions: ``activation_peak_bytes``, ``baseline_activation_peak_bytes``,
    ``peak_bytes``, ``step_ms``, ``baseline_step_ms`` (``policy="cost_model"`` only)."""
    hardware: dict[str, Any] = field(default_factory=dict)
    """The hardware profile the plan was costed with (``hardware.HardwareProfile``
    fields; ``policy="cost_model"`` and graphs whose transfers were simulated)."""
    simulation: Any = field(default=None, repr=False)
    """The simulated timeline of the final plan (``simulator.SimResult``)."""
    baseline_simulation: Any = field(default=None, repr=False)
    """The simulated timeline with nothing moved (same partition as the plan's start)."""
    note: str = ""
    """Anything the planner wants said: a budget it could not meet, for example."""
    dump_folder: str | None = None
    """Where this graph's dump was written, if dumping was on."""
    off_device: bool = False
    """No saved tensor is on an offload device: the graph passed through unchanged."""

    @property
    def recomputed(self) -> list[DecisionRecord]:
        return [d for d in self.decisions if d.decision is Decision.RECOMPUTE]

    @property
    def offloaded(self) -> list[DecisionRecord]:
        return [d for d in self.decisions if d.decision is Decision.OFFLOAD]

    @property
    def offloaded_bytes(self) -> int:
        return sum(d.nbytes for d in self.offloaded)

    @property
    def saved_bytes(self) -> int:
        return sum(d.nbytes for d in self.decisions)

    def summary(self) -> str:
        kept = len(self.decisions) - len(self.offloaded) - len(self.recomputed)
        if self.off_device:
            devices = sorted({d.device for d in self.decisions})
            return (
                f"graph {self.graph_id}: no activation on an offload device (saved tensors are "
                f"on {', '.join(devices)}); the graph passes through unchanged"
            )
        return (
            f"graph {self.graph_id}: {len(self.decisions)} saved activations "
            f"({_mib(self.saved_bytes)}), {len(self.offloaded)} offloaded "
            f"({_mib(self.offloaded_bytes)}), {len(self.recomputed)} recomputed, {kept} kept"
            + (
                f"; predicted activation peak {_mib(int(self.predicted['activation_peak_bytes']))} "
                f"(was {_mib(int(self.predicted['baseline_activation_peak_bytes']))}), step "
                f"{self.predicted['step_ms']:.2f} ms (was {self.predicted['baseline_step_ms']:.2f} ms)"
                if self.predicted else ""
            )
            + (f"; {self.note}" if self.note else "")
        )


def _mib(nbytes: int) -> str:
    return f"{nbytes / 2**20:.1f} MiB"


def choose(candidates: list[Candidate], config: OffloadConfig, graph_id: int) -> GraphPlan:
    plan = GraphPlan(graph_id)
    host_bytes = 0
    for c in candidates:
        decision, reason = Decision.KEEP, c.reason
        if c.eligible:
            if config.policy == "none":
                reason = "policy='none'"
            elif config.max_host_bytes is not None and host_bytes + c.nbytes > config.max_host_bytes:
                reason = (
                    f"max_host_bytes={config.max_host_bytes} reached "
                    f"({host_bytes} bytes already planned)"
                )
            else:
                decision, reason = Decision.OFFLOAD, "policy='all': eligible"
                host_bytes += c.nbytes
        plan.decisions.append(_record(c, decision, f"{decision.value}: {reason}"))
    return plan


def offloads_of(plan: GraphPlan) -> list[Offload]:
    return [Offload(name=d.name, nbytes=d.nbytes, reason=d.reason) for d in plan.offloaded]


def decide_from_solution(candidates: list[Candidate], solution, graph_id: int,
                         earlier: dict[str, Candidate]) -> GraphPlan:
    """Decision records for the final partition's saved values, from the solver's choice.

    Recomputed values no longer appear among the saved ones; they are recorded too.
    """
    plan = GraphPlan(graph_id)
    present = set()
    for c in candidates:
        present.add(c.name)
        choice = solution.decisions.get(c.name)
        decision = Decision.KEEP
        if choice == "offload" and c.eligible:
            decision, reason = Decision.OFFLOAD, solution.reasons[c.name]
        elif choice == "recompute":
            reason = "keep: the min-cut partitioner kept it saved"
        elif choice == "keep":
            reason = solution.reasons[c.name]
        elif not c.eligible:  # not simulated: a graph input, or unused by backward
            reason = f"keep: {c.reason}"
        else:
            reason = "keep: saved by the partition that realises the recomputation"
        plan.decisions.append(_record(c, decision, reason))
    for name, choice in solution.decisions.items():
        if choice == "recompute" and name not in present:
            plan.decisions.append(_record(earlier[name], Decision.RECOMPUTE, solution.reasons[name]))
    return plan


def _record(c: Candidate, decision: Decision, reason: str) -> DecisionRecord:
    return DecisionRecord(
        name=c.name, producer=c.producer, shape=c.shape,
        dtype=str(c.dtype).removeprefix("torch."), device=c.device, nbytes=c.nbytes,
        decision=decision, reason=reason,
    )


def predictions(baseline, final, budget_bytes: int | None = None) -> dict[str, float]:
    """The planner's predictions for a plan (``final``) against nothing moved (``baseline``).

    ``peak_bytes`` is the predicted activation peak: the part of device memory the plan
    changes, with the output of the backward op running. ``step_peak_bytes`` adds the
    step's other tensors (forward and backward intermediates, gradients): the peak of
    memory allocated during the step less what was held before it.
    """
    return {
        "activation_peak_bytes": final.peak_bytes,
        "baseline_activation_peak_bytes": baseline.peak_bytes,
        "peak_bytes": final.peak_bytes,
        "peak_time_ms": final.peak_time_ms,
        "step_peak_bytes": final.step_peak_bytes,
        "baseline_step_peak_bytes": baseline.step_peak_bytes,
        "step_ms": final.step_ms,
        "baseline_step_ms": baseline.step_ms,
        "stall_ms": final.stall_ms,
        "budget_bytes": -1 if budget_bytes is None else budget_bytes,
    }
