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
        kept = len(self.decisions) - len(self.offloaded)
        if self.decisions and all("not in devices" in d.reason for d in self.decisions
                                  if d.producer != "placeholder"):
            devices = sorted({d.device for d in self.decisions})
            return (
                f"graph {self.graph_id}: no activation on an offload device (saved tensors are "
                f"on {', '.join(devices)}); the graph passes through unchanged"
            )
        return (
            f"graph {self.graph_id}: {len(self.decisions)} saved activations "
            f"({_mib(self.saved_bytes)}), {len(self.offloaded)} offloaded "
            f"({_mib(self.offloaded_bytes)}), {kept} kept"
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
        plan.decisions.append(DecisionRecord(
            name=c.name,
            producer=c.producer,
            shape=c.shape,
            dtype=str(c.dtype).removeprefix("torch."),
            device=c.device,
            nbytes=c.nbytes,
            decision=decision,
            reason=reason,
        ))
    return plan


def offloads_of(plan: GraphPlan) -> list[Offload]:
    return [Offload(name=d.name, nbytes=d.nbytes, reason=d.reason) for d in plan.offloaded]
