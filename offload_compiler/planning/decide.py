"""From a choice to decision records: the fixed policies (``"all"``, ``"none"``) and the
cost model's solution, each tensor with its decision and the reason for it.

- ``"all"``: every eligible activation, in forward order, while the graph's host bytes
  stay within ``max_host_bytes``;
- ``"none"``: nothing (the inner compiler's result, unchanged);
- ``"cost_model"``: the solver's :class:`~.solver.Solution` on the final partition,
  with the values an earlier round recomputed recorded too.
"""

from __future__ import annotations

from passes import Candidate, Offload

from ..config import OffloadConfig
from ..decision import KEEP, OFFLOAD, RECOMPUTE, Decision
from ..reporting.records import DecisionRecord, GraphPlan
from .solver import Solution


def choose(candidates: list[Candidate], config: OffloadConfig, graph_id: int) -> GraphPlan:
    plan = GraphPlan(graph_id)
    host_bytes = 0
    for c in candidates:
        decision, reason = KEEP, c.reason
        if c.eligible:
            if config.policy == "none":
                reason = "policy='none'"
            elif config.max_host_bytes is not None and host_bytes + c.nbytes > config.max_host_bytes:
                reason = (
                    f"max_host_bytes={config.max_host_bytes} reached "
                    f"({host_bytes} bytes already planned)"
                )
            else:
                decision, reason = OFFLOAD, "policy='all': eligible"
                host_bytes += c.nbytes
        plan.decisions.append(_record(c, decision, f"{decision.value}: {reason}"))
    return plan


def offloads_of(plan: GraphPlan) -> list[Offload]:
    return [Offload(name=d.name, nbytes=d.nbytes, reason=d.reason) for d in plan.offloaded]


def decide_from_solution(candidates: list[Candidate], solution: Solution, graph_id: int,
                         earlier: dict[str, Candidate]) -> GraphPlan:
    """Decision records for the final partition's saved values, from the solver's choice.

    Recomputed values no longer appear among the saved ones; they are recorded too.
    """
    plan = GraphPlan(graph_id)
    present = set()
    for c in candidates:
        present.add(c.name)
        choice = solution.decisions.get(c.name)
        decision = KEEP
        if choice == OFFLOAD and c.eligible:
            decision, reason = OFFLOAD, solution.reasons[c.name]
        elif choice == RECOMPUTE:
            reason = "keep: the min-cut partitioner kept it saved"
        elif choice == KEEP:
            reason = solution.reasons[c.name]
        elif not c.eligible:  # not simulated: a graph input, or unused by backward
            reason = f"keep: {c.reason}"
        else:
            reason = "keep: saved by the partition that realises the recomputation"
        plan.decisions.append(_record(c, decision, reason))
    for name, choice in solution.decisions.items():
        if choice == RECOMPUTE and name not in present:
            plan.decisions.append(_record(earlier[name], RECOMPUTE, solution.reasons[name]))
    return plan


def _record(c: Candidate, decision: Decision, reason: str) -> DecisionRecord:
    return DecisionRecord(
        name=c.name, producer=c.producer, shape=c.shape,
        dtype=str(c.dtype).removeprefix("torch."), device=c.device, nbytes=c.nbytes,
        decision=decision, reason=reason, module_path=c.module_path, source_line=c.source_line,
        kind=c.kind,
    )
