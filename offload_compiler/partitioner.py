"""The partitioner Inductor (or AOTAutograd) calls with the joint graph.

It runs torch's min-cut partitioner, then the passes: analyze the saved activations,
choose what to offload, insert the transfer nodes, schedule the reloads, annotate
streams and events. Installed through ``torch._inductor.config.custom_partitioner_fn``
for the scope of one ``compile_fx`` call, never globally.
"""

from __future__ import annotations

import dataclasses
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
        fw_gm, bw_gm = min_cut_rematerialization_partition(gm, joint_inputs, **kwargs)
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
                _simulate(plan, facts, planner.final_simulation(facts, {}, lanes), lanes)
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
        facts = planner.gather(fw_gm, bw_gm, num_fwd_outputs, candidates, joint_gm, cost)
        baseline = planner.final_simulation(facts, {}, lanes)
        earlier = {c.name: c for c in candidates}
        recomputed: dict[str, str] = {}  # name -> reason, over all rounds
        auto = self.config.memory_budget == "auto"
        bound = None  # after the first round: the peak to hold the plan to
        for _ in range(MAX_ROUNDS):
            solution = planner.solve_facts(facts, self.config, lanes, baseline.peak_bytes, bound)
            recompute = [n for n, d in solution.decisions.items() if d == planner.RECOMPUTE]
            recomputed.update((n, solution.reasons[n]) for n in recompute)
            if recompute:
                planner.tag_recompute(joint_gm, [facts.chains[n] for n in recompute])
                fw_gm, bw_gm = min_cut_rematerialization_partition(joint_gm, joint_inputs, **kwargs)
                candidates = self._analyze(fw_gm, bw_gm, num_fwd_outputs)
                earlier.update((c.name, c) for c in candidates if c.name not in earlier)
                facts = planner.gather(fw_gm, bw_gm, num_fwd_outputs, candidates, joint_gm, cost)
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
        if recomputed:
            dumper.stage("recomputed", fw_gm, bw_gm)
        solution = dataclasses.replace(
            solution,
            decisions={**solution.decisions, **{n: planner.RECOMPUTE for n in recomputed}},
            reasons={**solution.reasons, **recomputed})
        if auto:
            solution = dataclasses.replace(solution, budget_bytes=None, met=True, note="")
        plan = decide_from_solution(candidates, solution, graph_id, earlier)
        final = _simulate(plan, facts, baseline, lanes, solution.budget_bytes)
        budget = solution.budget_bytes
        if budget is not None and final.peak_bytes > budget:
            plan.note = (f"budget of {budget} bytes not reachable: best effort predicts "
                         f"{final.peak_bytes} bytes")
        release_after = {name: facts.fw_nodes[i] for name, i in final.release_after.items()}
        issue_before = {name: facts.bw_nodes[k] for name, k in final.reload_before.items()}
        return fw_gm, bw_gm, plan, (release_after, issue_before)

    def uuid(self) -> str:
        """Changes with the config and with the code of this package and of ``passes``."""
        return f"offload-{_source_hash()}-{self.config.fingerprint()}"


def _simulate(plan: GraphPlan, facts, baseline, lanes, budget_bytes=None):
    """Simulate the plan's decisions; attach the timeline and the predictions."""
    decisions = {d.name: d.decision.value for d in plan.decisions}
    final = planner.final_simulation(facts, decisions, lanes)
    plan.simulation, plan.baseline_simulation = final, baseline
    plan.predicted = predictions(baseline, final, budget_bytes)
    return final


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
