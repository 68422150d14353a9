"""The partitioner Inductor (or AOTAutograd) calls with the joint graph.

It runs torch's min-cut partitioner, then the passes: analyze the saved activations,
choose what to offload, insert the transfer nodes, schedule the reloads, annotate
streams and events. Installed through ``torch._inductor.config.custom_partitioner_fn``
for the scope of one ``compile_fx`` call, never globally.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import logging
from pathlib import Path
from typing import Any, Callable, Sequence

import torch.fx as fx
from torch._functorch.partitioners import min_cut_rematerialization_partition
from torch._inductor.custom_graph_pass import CustomPartitionerFn

from passes import (
    analyze_candidates,
    annotate_streams,
    insert_transfers,
    keep_matmuls_early,
    schedule_prefetches,
    schedule_releases,
)

from . import planner
from . import report
from .config import OffloadConfig
from .costs import NodeCosts
from .dump import Dumper, dump_root
from .hardware import profile_for
from .plan import GraphPlan, choose, decide_from_solution, offloads_of, predictions

log = logging.getLogger("offload_compiler")

#: Solve, repartition, check against a fixed budget: at most this many times.
MAX_ROUNDS = 3
#: ``"auto"``: fixed budgets tried on realised partitions after the solver's own choice.
AUTO_REALISED_STEPS = 4


@dataclasses.dataclass
class _Partition:
    fw_gm: fx.GraphModule
    bw_gm: fx.GraphModule
    candidates: list
    facts: Any


@dataclasses.dataclass
class _Realised(_Partition):
    """One plan realised: its partition, the solver's answer, the simulated timeline."""

    solution: Any
    final: Any
    recomputed: dict[str, str]
    earlier: dict[str, Any]

_graph_ids = itertools.count()


def _source_hash() -> str:
    root = Path(__file__).resolve().parent
    files = sorted([*root.rglob("*.py"), *(root.parent / "passes").rglob("*.py")])
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.read_bytes())
    return digest.hexdigest()[:16]


class OffloadPartitioner(CustomPartitionerFn):
    def __init__(
        self, config: OffloadConfig, on_plan: Callable[[GraphPlan], None] | None = None
    ) -> None:
        self.config = config
        self.on_plan = on_plan

    def __call__(
        self, gm: fx.GraphModule, joint_inputs: Sequence[object], **kwargs: Any
    ) -> tuple[fx.GraphModule, fx.GraphModule]:
        kwargs.setdefault("compiler", "inductor")
        num_fwd_outputs = kwargs["num_fwd_outputs"]
        graph_id = next(_graph_ids)
        dumper = Dumper(dump_root(self.config.dump_dir))
        dumper.joint(gm)
        fw_gm, bw_gm = _partition(gm, joint_inputs, kwargs)
        dumper.stage("partitioned", fw_gm, bw_gm)
        candidates = self._analyze(fw_gm, bw_gm, num_fwd_outputs)
        off_device = not any(c.device.split(":")[0] in self.config.devices for c in candidates)
        if self.config.policy == "cost_model" and not off_device:
            fw_gm, bw_gm, plan, schedule = self._plan_cost_model(
                gm, joint_inputs, kwargs, fw_gm, bw_gm, candidates, graph_id, dumper)
        else:
            plan, schedule = choose(candidates, self.config, graph_id), None
            if not off_device:
                cost, lanes = self._cost_model(candidates)
                facts = planner.gather(fw_gm, bw_gm, num_fwd_outputs, candidates, None, cost)
                _simulate(plan, facts, planner.final_simulation(facts, {}, lanes), lanes, cost.hw)
        plan.off_device = off_device
        insert_transfers(fw_gm, bw_gm, num_fwd_outputs, offloads_of(plan))
        dumper.stage("transfers", fw_gm, bw_gm)
        if schedule is not None:
            release_after, issue_before = schedule
            schedule_releases(fw_gm, release_after)
            schedule_prefetches(bw_gm, self.config.prefetch_depth, issue_before)
        else:
            schedule_prefetches(bw_gm, self.config.prefetch_depth)
        annotate_streams(fw_gm, bw_gm)
        plan.fw_graph, plan.bw_graph = fw_gm, bw_gm
        dumper.stage("scheduled", fw_gm, bw_gm)
        dumper.plan(plan, self.config)
        plan.dump_folder = str(dumper.folder) if dumper.enabled else None
        _trace_artifact(plan, self.config)
        log.info("offload: %s", plan.summary())
        for d in plan.decisions:
            log.debug("offload: graph %d: %s %s (%d bytes): %s",
                      graph_id, d.decision.value, d.name, d.nbytes, d.reason)
        if self.on_plan is not None:
            self.on_plan(plan)
        return fw_gm, bw_gm

    def _cost_model(self, candidates) -> tuple[NodeCosts, planner.Lanes]:
        """Node costs and the copy lanes to plan with, for the graph's device."""
        device = _device_of(candidates, self.config.devices)
        hw = profile_for(device, dict(self.config.hardware or ()))
        cost = NodeCosts(hw, profile=self.config.node_costs == "profile")
        return cost, planner.lanes_of(hw, self.config.copy_margin)

    def _analyze(self, fw_gm, bw_gm, num_fwd_outputs):
        return analyze_candidates(
            fw_gm, bw_gm, num_fwd_outputs,
            devices=self.config.devices, min_offload_bytes=self.config.min_offload_bytes,
        )

    def _plan_cost_model(self, joint_gm, joint_inputs, kwargs, fw_gm, bw_gm, candidates,
                         graph_id, dumper):
        num_fwd_outputs = kwargs["num_fwd_outputs"]
        cost, lanes = self._cost_model(candidates)
        facts = planner.gather(fw_gm, bw_gm, num_fwd_outputs, candidates, joint_gm, cost,
                               self.config.min_offload_bytes)
        baseline = planner.final_simulation(facts, {}, lanes)
        start = _Partition(fw_gm, bw_gm, candidates, facts)
        tags = {n.name: n.meta["recompute"] for n in joint_gm.graph.nodes if "recompute" in n.meta}
        realise = functools.partial(self._realise, joint_gm, joint_inputs, kwargs, start, lanes,
                                    baseline, cost)
        auto = self.config.memory_budget == "auto"
        best = realise(None)
        if auto and any(o.can_recompute for o in facts.options.values()):
            best = self._search_realised(best, realise, baseline, joint_gm, tags)
        if best.recomputed:
            dumper.stage("recomputed", best.fw_gm, best.bw_gm)
        # What an earlier round recomputed and the last round's partition still saves
        # (min-cut kept it), the last round decided on: its decision stands.
        solution = dataclasses.replace(
            best.solution,
            decisions={**{n: planner.RECOMPUTE for n in best.recomputed}, **best.solution.decisions},
            reasons={**best.recomputed, **best.solution.reasons})
        if auto:
            solution = dataclasses.replace(solution, budget_bytes=None, met=True, note="")
        plan = decide_from_solution(best.candidates, solution, graph_id, best.earlier)
        final = _simulate(plan, best.facts, baseline, lanes, cost.hw, solution.budget_bytes)
        budget = solution.budget_bytes
        if budget is not None and final.peak_bytes > budget:
            plan.note = (f"budget of {budget} bytes not reachable: best effort predicts "
                         f"{final.peak_bytes} bytes")
        release_after = {name: best.facts.fw_nodes[i] for name, i in final.release_after.items()}
        issue_before = {name: best.facts.bw_nodes[k] for name, k in final.reload_before.items()}
        return best.fw_gm, best.bw_gm, plan, (release_after, issue_before)

    def _realise(self, joint_gm, joint_inputs, kwargs, start: "_Partition", lanes, baseline,
                 cost, budget_bytes: int | None) -> "_Realised":
        """Solve on ``start`` (the default partition) for ``budget_bytes`` (``None``: the
        config's budget), realise the recomputation by tagging ``joint_gm`` and running
        min-cut again, and simulate the result; solve again on the realised partition
        where it misses the budget, up to ``MAX_ROUNDS`` times in all."""
        num_fwd_outputs = kwargs["num_fwd_outputs"]
        fw_gm, bw_gm, candidates, facts = start.fw_gm, start.bw_gm, start.candidates, start.facts
        earlier = {c.name: c for c in candidates}
        recomputed: dict[str, str] = {}  # name -> reason, over all rounds
        auto = self.config.memory_budget == "auto"
        bound = None  # after the first round: the peak to hold the plan to
        for _ in range(MAX_ROUNDS):
            solution = planner.solve_facts(facts, self.config, lanes, baseline.peak_bytes,
                                           budget_bytes if bound is None else bound)
            recompute = [n for n, d in solution.decisions.items() if d == planner.RECOMPUTE]
            recomputed.update((n, solution.reasons[n]) for n in recompute)
            if recompute:
                planner.tag_recompute(joint_gm, [facts.chains[n] for n in recompute])
                fw_gm, bw_gm = _partition(joint_gm, joint_inputs, kwargs)
                candidates = self._analyze(fw_gm, bw_gm, num_fwd_outputs)
                earlier.update((c.name, c) for c in candidates if c.name not in earlier)
                facts = planner.gather(fw_gm, bw_gm, num_fwd_outputs, candidates, joint_gm, cost,
                                       self.config.min_offload_bytes)
            decisions = {n: d for n, d in solution.decisions.items() if d != planner.RECOMPUTE}
            final = planner.final_simulation(facts, decisions, lanes)
            # The partition that realises the recomputation is not the one the solver
            # saw (recomputed ops move into backward, reloads are issued elsewhere): where
            # it misses the budget (for "auto", the peak the solver found), solve again
            # on it for what is left.
            if bound is None:
                bound = solution.budget_bytes if not auto else solution.result.peak_bytes
            if not recompute or final.peak_bytes <= bound:
                break
        return _Realised(fw_gm, bw_gm, candidates, facts, solution, final, recomputed, earlier)

    def _search_realised(self, first: "_Realised", realise, baseline, joint_gm, tags) -> "_Realised":
        """``"auto"``: the least realised activation peak whose realised step stays within
        ``max_overhead``, bisecting over fixed budgets (``AUTO_REALISED_STEPS`` probes).

        The solver's own search prices a recomputation by its chain in the default
        partition; min-cut often realises it cheaper (a value it recomputes is reused by
        the next), so the solver's choice is the starting point, not the answer. A probe
        that meets the overhead narrows the search downwards, one that misses it upwards.
        """
        limit_ms = baseline.step_ms * (1 + self.config.max_overhead)
        best = first if first.final.step_ms <= limit_ms else None
        if best is not None:
            lo, hi = first.final.peak_bytes // 2, first.final.peak_bytes
        else:
            lo, hi = first.final.peak_bytes, baseline.peak_bytes
        for _ in range(AUTO_REALISED_STEPS):
            mid = (lo + hi) // 2
            _restore_tags(joint_gm, tags)
            trial = realise(mid)
            if trial.final.step_ms <= limit_ms:
                hi = min(mid, trial.final.peak_bytes)
                if best is None or (trial.final.peak_bytes, trial.final.step_ms) < (
                        best.final.peak_bytes, best.final.step_ms):
                    best = trial
            else:
                lo = mid
        if best is None:  # nothing moved is always within the overhead
            _restore_tags(joint_gm, tags)
            best = realise(baseline.peak_bytes)
        return best

    def uuid(self) -> str:
        """Changes with the config and with the code of this package and of ``passes``."""
        return f"offload-{_source_hash()}-{self.config.fingerprint()}"


def _partition(joint_gm: fx.GraphModule, joint_inputs, kwargs) -> tuple[fx.GraphModule, fx.GraphModule]:
    """Min-cut's partition, with backward's matmuls kept where they are
    (``passes.keep_matmuls_early``)."""
    fw_gm, bw_gm = min_cut_rematerialization_partition(joint_gm, joint_inputs, **kwargs)
    keep_matmuls_early(bw_gm)
    return fw_gm, bw_gm


def _simulate(plan: GraphPlan, facts, baseline, lanes, hw, budget_bytes=None):
    """Simulate the plan's decisions; attach the timeline, the predictions and the
    hardware profile ``hw`` they were costed with."""
    plan.hardware = dataclasses.asdict(hw)
    decisions = {d.name: d.decision.value for d in plan.decisions}
    final = planner.final_simulation(facts, decisions, lanes)
    plan.simulation, plan.baseline_simulation = final, baseline
    plan.predicted = predictions(baseline, final, budget_bytes)
    return final


def _restore_tags(joint_gm: fx.GraphModule, tags: dict[str, Any]) -> None:
    """Put back the recompute tags ``tags`` recorded by node name (the user's, before
    any probe tagged the graph). By name: min-cut's CSE pass replaces the joint graph's
    nodes with copies on every call."""
    for node in joint_gm.graph.nodes:
        if node.name in tags:
            node.meta["recompute"] = tags[node.name]
        else:
            node.meta.pop("recompute", None)


def _device_of(candidates, devices: tuple[str, ...]) -> str:
    """The device the plan is for: the first saved activation on an allowed device."""
    for c in candidates:
        if c.device.split(":")[0] in devices:
            return c.device
    return "cpu"


def _trace_artifact(plan: GraphPlan, config: OffloadConfig) -> None:
    """The plan as a structured trace artifact, for TORCH_TRACE / tlparse users."""
    try:
        from torch._logging import trace_structured
    except ImportError:  # pragma: no cover
        return
    trace_structured(
        "artifact",
        metadata_fn=lambda: {"name": f"offload_plan_graph_{plan.graph_id}", "encoding": "json"},
        payload_fn=lambda: report.to_json(report.plan_dict(plan, config)),
    )
