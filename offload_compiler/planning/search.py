"""The planning loop: from a partitioned graph to a realised plan and its schedule.

One entry point, :func:`plan_graph`, for every policy:

- ``"all"`` / ``"none"``: a fixed choice (:func:`.decide.choose`), simulated for the
  record on the cost model when the graph is on an offload device.
- ``"cost_model"``: the budget is settled once (:class:`.budget.Budget`), then
  :func:`_realise` solves on the default partition (min-cut's), realises the
  recomputation on it (each recomputed value's chain copied into backward,
  ``passes.recompute_saved``) and simulates; where the realised partition misses the
  bound it solves again on it, up to ``MAX_ROUNDS`` times. For ``"auto"``,
  :func:`_search_realised` then searches fixed budgets on realised partitions
  (``AUTO_REALISED_STEPS`` probes, each where the line through the realised plans so
  far meets the step limit), since a recomputation realised costs less than the
  solver's per-value chains say where chains share ops. The result is the decisions,
  the partition that realises them, the predictions and where each release and reload
  goes.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from dataclasses import dataclass

import torch.fx as fx

from passes import Candidate
from passes.recompute_saved import saved_views
from passes.schedule_prefetches import NEXT_CALL

from ..config import OffloadConfig
from ..decision import KEEP, RECOMPUTE
from ..nbytes import nbytes_text
from ..reporting.records import GraphPlan, Predictions
from .budget import Budget, edge_budget, interpolate_budgets
from .costs import NodeCosts
from .decide import choose, decide_from_solution
from .facts import Facts, final_simulation, gather, lanes_of, resimulation
from .hardware import profile_for
from .judging import within_margin
from .limits import fit_limit, unmoved_fits
from .replan import Corrections
from .reuse import Analyze, Partition, Reuse, realise
from .simulator import Lanes, SimResult
from .solver import SimMemo, Solution, solve

#: Progress of a compile, one line per phase (a child of ``offload_compiler``: the INFO summary stays alone).
progress = logging.getLogger("offload_compiler.progress")

#: Solve, repartition, check against a fixed budget: at most this many times.
MAX_ROUNDS = 3
#: ``"auto"``: fixed budgets tried on realised partitions after the solver's own choice.
AUTO_REALISED_STEPS = 4

@dataclass
class _Realised(Partition):
    """One plan realised: its partition, the solver's answer, the simulated timeline."""

    solution: Solution | None = None
    final: SimResult | None = None
    recomputed: dict[str, str] = dataclasses.field(default_factory=dict)
    earlier: dict[str, Candidate] = dataclasses.field(default_factory=dict)
    chains: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    """The recompute chains realised on the default partition to make this one."""


@dataclass
class PlannedGraph:
    """What :func:`plan_graph` hands the rewrite: the partition to rewrite, the plan, and
    (cost model only) where each release goes and before which op each reload is issued."""

    fw_gm: fx.GraphModule
    bw_gm: fx.GraphModule
    plan: GraphPlan
    release_after: dict[str, fx.Node] | None = None
    issue_before: dict[str, fx.Node] | None = None
    recomputed: bool = False
    """The partition differs from min-cut's (recomputation was realised)."""
    recompute_chains: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    """The recompute chains realised on min-cut's partition to make this one (for the
    plan cache)."""


def plan_graph(joint_gm: fx.GraphModule, start: Partition, num_fwd_outputs: int,
               config: OffloadConfig, graph_id: int, analyze: Analyze,
               corrections: Corrections = Corrections(), search: bool = True) -> PlannedGraph:
    """Plan one graph: ``start`` is min-cut's partition of ``joint_gm`` and its candidates;
    ``analyze`` makes the candidates of a partition that realises recomputation;
    ``corrections`` are
    inputs measured on an earlier plan of the same graph (``replan.py``) and, with
    ``memory_limit``, the bytes the step may take. ``search=False``: for a graph the
    backend will measure and plan again from the measurement, where the search runs on
    measured inputs, ``"auto"``'s plan is not searched (``GraphPlan.provisional``): it
    moves nothing where that step fits the device (``limits.unmoved_fits``; not with
    ``per_block``, whose peak is one call's of many), and its measurement is then the step
    the re-plan holds ``max_overhead`` against; else it is the solver's plan without
    probing realised partitions."""
    off_device = not any(c.device.split(":")[0] in config.devices for c in start.candidates)
    if config.policy == "cost_model" and not off_device:
        planned = _plan_cost_model(joint_gm, start, num_fwd_outputs, config, graph_id, analyze,
                                   corrections, search)
    else:
        plan = choose(start.candidates, config, graph_id)
        if not off_device:
            cost, lanes = _cost_model(start.candidates, config, corrections)
            facts = gather(start.fw_gm, start.bw_gm, num_fwd_outputs, start.candidates, None, cost,
                           pool=_pooled(config))
            _simulate(plan, facts, final_simulation(facts, {}, lanes), lanes, cost, corrections)
        planned = PlannedGraph(start.fw_gm, start.bw_gm, plan)
    planned.plan.off_device = off_device
    return planned


def replay(joint_gm: fx.GraphModule, start: Partition, num_fwd_outputs: int,
           chains: dict[str, list[str]], plan: GraphPlan, release_after: dict[str, str] | None,
           issue_before: dict[str, str] | None, analyze: Analyze) -> PlannedGraph | None:
    """A plan made before, applied without planning: the recorded recompute ``chains``
    are realised on ``start`` (min-cut's partition), and the recorded decisions and
    schedule (by node name) are looked up in the result. ``None`` if they do not fit it
    (a chain not realisable, an offloaded value missing or no longer eligible, a
    schedule node missing)."""
    part, left_out = realise(joint_gm, start, num_fwd_outputs, chains, analyze)
    by_name = {c.name: c for c in part.candidates}
    fw_nodes = {n.name: n for n in part.fw_gm.graph.nodes}
    bw_nodes = {n.name: n for n in part.bw_gm.graph.nodes}
    fits = not left_out and all(d.name in by_name and by_name[d.name].eligible for d in plan.offloaded)
    fits = fits and all(v in fw_nodes for v in (release_after or {}).values())
    fits = fits and all(v in bw_nodes for v in (issue_before or {}).values())
    if not fits:
        return None
    return PlannedGraph(
        part.fw_gm, part.bw_gm, plan,
        None if release_after is None else {k: fw_nodes[v] for k, v in release_after.items()},
        None if issue_before is None else {k: bw_nodes[v] for k, v in issue_before.items()},
        recomputed=bool(chains), recompute_chains=dict(chains))


def _cost_model(candidates: list[Candidate], config: OffloadConfig,
                corrections: Corrections = Corrections()) -> tuple[NodeCosts, Lanes]:
    """Node costs and the copy lanes to plan with, for the graph's device (with the
    measured bandwidths and compute scales of ``corrections``)."""
    device = _device_of(candidates, config.devices)
    hw = profile_for(device, {**dict(config.hardware or ()), **corrections.hardware()})
    cost = NodeCosts(hw, profile=config.node_costs == "profile", fw_scale=corrections.fw_scale,
                     bw_scale=corrections.bw_scale, recompute_scale=corrections.recompute_scale)
    lanes = lanes_of(hw, config.copy_margin, chained=config.per_block)
    return cost, dataclasses.replace(lanes, host_us=corrections.host_us, op_host_us=corrections.op_host_us,
                                     host_lead_ms=corrections.queued_ms)


def _plan_cost_model(joint_gm, start: Partition, num_fwd_outputs: int, config: OffloadConfig,
                     graph_id: int, analyze: Analyze, corrections: Corrections,
                     search: bool = True) -> PlannedGraph:
    t0, config = time.perf_counter(), within_margin(config, corrections)
    cost, lanes = _cost_model(start.candidates, config, corrections)
    facts = gather(start.fw_gm, start.bw_gm, num_fwd_outputs, start.candidates, joint_gm, cost,
                   config.min_offload_bytes, pool=_pooled(config))
    start, baseline = dataclasses.replace(start, facts=facts), final_simulation(facts, {}, lanes)
    budget = Budget.settle(config.memory_budget, baseline.peak_bytes)
    progress.info("offload: graph %d: planning %d saved activations (%s; peak %s, step %.2f ms with "
             "nothing moved) for %s; costed in %.1f s", graph_id, len(facts.tensors),
             nbytes_text(sum(x.nbytes for x in facts.tensors)), nbytes_text(baseline.peak_bytes),
             baseline.step_ms, budget.describe() if corrections.available_bytes is None else
             f"memory_limit ({nbytes_text(corrections.available_bytes)} available)", time.perf_counter() - t0)
    reuse = Reuse(joint_gm, start, num_fwd_outputs, analyze, functools.partial(
        _gather_facts, num_fwd_outputs=num_fwd_outputs, joint_gm=joint_gm, cost=cost,
        min_bytes=config.min_offload_bytes, pool=_pooled(config)))
    available = corrections.available_bytes
    decide_lanes = _auto_lanes(facts, lanes, baseline) if budget.auto and available is None else lanes
    realise = functools.partial(_realise, joint_gm, num_fwd_outputs, config, start, decide_lanes,
                                baseline, cost, budget, reuse)
    t1 = time.perf_counter()
    best, provisional = None, False
    # "auto", measured next: nothing moved where it fits (one call's peak: not per_block),
    # so its measurement is the baseline.
    unmoved = (not search and budget.auto and available is None and not config.per_block
               and unmoved_fits(baseline.step_peak_bytes, _device_of(start.candidates, config.devices)))
    if unmoved:
        best, provisional = realise(baseline.peak_bytes), True
        progress.info("offload: graph %d: \"auto\": nothing moved, measured as the step the search "
                      "holds max_overhead against when the graph is planned again", graph_id)
    elif available is None or not budget.auto:  # memory_limit with "auto": starts from nothing moved
        best = realise(budget.nbytes)
        progress.info("offload: graph %d: solved and realised in %.1f s: peak %s, step %.2f ms",
                      graph_id, time.perf_counter() - t1, nbytes_text(best.final.peak_bytes), best.final.step_ms)
    if available is not None:
        best = fit_limit(best, realise, baseline.peak_bytes, available, corrections, graph_id)
    elif budget.auto and not unmoved and any(o.can_recompute for o in facts.options.values()):
        if search:
            best = _search_realised(best, realise, baseline, config.max_overhead, graph_id)
        else:
            provisional = True
            progress.info("offload: graph %d: \"auto\": the solver's plan, not searched; the search "
                          "runs when the graph is planned again from its measured step", graph_id)
    progress.info("offload: graph %d: planned in %.1f s", graph_id, time.perf_counter() - t0)
    # What an earlier round recomputed and the last round's partition still saves
    # (min-cut kept it), the last round decided on: its decision stands.
    solution = dataclasses.replace(
        best.solution,
        decisions={**{n: RECOMPUTE for n in best.recomputed}, **best.solution.decisions},
        reasons={**best.recomputed, **best.solution.reasons})
    if budget.auto and available is None:
        solution = dataclasses.replace(solution, budget_bytes=None, met=True, note="")
    plan = decide_from_solution(best.candidates, solution, graph_id, best.earlier)
    plan.provisional = provisional
    final = _simulate(plan, best.facts, baseline, lanes, cost, corrections, solution.budget_bytes)
    if solution.budget_bytes is not None and final.peak_bytes > solution.budget_bytes:
        plan.note = (f"budget of {nbytes_text(solution.budget_bytes)} not reachable: best effort "
                     f"predicts {nbytes_text(final.peak_bytes)}")
    release_after = {name: best.facts.fw_nodes[i] for name, i in final.release_after.items()}
    issue_before = {name: best.facts.bw_nodes[k] for name, k in final.reload_before.items()}
    if final.next_call_before is not None:  # per_block: where the next call's reloads go
        issue_before[NEXT_CALL] = best.facts.bw_nodes[final.next_call_before]
    return PlannedGraph(best.fw_gm, best.bw_gm, plan, release_after, issue_before,
                        recomputed=bool(best.chains), recompute_chains=best.chains)


def _auto_lanes(facts: Facts, lanes: Lanes, baseline: SimResult) -> Lanes:
    """The lanes ``"auto"`` decides on: where a measurement gave the host a lane, each
    plan's overhead over nothing moved is the larger of its overhead with the host and
    without it (``Lanes.without_host_scale``). The host's pace is one plan's measured
    calls, and it varies as much as twofold between calls, machines and plans (on an H100,
    ResNet-50's forward with nothing moved issued in 8.4 to 16.1 ms within one run,
    ``benchmarks/RESULTS.md``, session 33); where that pace makes the host the
    bottleneck, the GPU work a plan adds (recomputation, stalls) would look free, and it
    is not once the host runs faster: ResNet-50's re-plans, made with a host lane that
    put the step with nothing moved 9% to 52% over Inductor's, ran 1.28x and 1.32x its
    step. Held on both timelines, the overhead holds at either pace."""
    if not any(lanes.host_us + lanes.op_host_us):
        return lanes
    own = final_simulation(facts, {}, dataclasses.replace(lanes, host_us=(0.0, 0.0), op_host_us=(0.0, 0.0)))
    if own.step_ms <= 0:
        return lanes
    return dataclasses.replace(lanes, without_host_scale=baseline.step_ms / own.step_ms)


def _solve(facts: Facts, config: OffloadConfig, lanes: Lanes, budget_bytes: int | None,
           auto: bool, memo: SimMemo | None = None) -> Solution:
    """The solver on ``facts`` for ``budget_bytes`` (``None``: ``"auto"``'s own search);
    ``memo``: the simulations earlier solves on ``facts`` ran."""
    return solve(
        facts.fw_ms, facts.bw_ms, facts.tensors, facts.options, lanes,
        budget_bytes=budget_bytes, max_overhead=config.max_overhead,
        host_cap_bytes=config.max_host_bytes, for_auto=auto,
        bw_out_bytes=facts.bw_out_bytes, slowed=facts.slowed, memo=memo,
    )


def _gather_facts(fw_gm: fx.GraphModule, bw_gm: fx.GraphModule, candidates: list[Candidate], *,
                  num_fwd_outputs: int, joint_gm: fx.GraphModule, cost: NodeCosts,
                  min_bytes: int, pool: bool) -> Facts:
    return gather(fw_gm, bw_gm, num_fwd_outputs, candidates, joint_gm, cost, min_bytes, pool=pool)


def _pooled(config: OffloadConfig) -> bool:
    """The graphs run with Inductor's buffer pool where Inductor compiles them (but a
    backward with transfer ops: ``simulator.simulate``)."""
    return config.inner_compiler == "inductor"


def _realise(joint_gm, num_fwd_outputs: int, config: OffloadConfig, start: Partition, lanes, baseline, cost,
             budget: Budget, reuse: Reuse, budget_bytes: int | None) -> _Realised:
    """Solve on ``start`` (the default partition) for ``budget_bytes`` (``None``:
    ``"auto"``'s own search), realise the recomputation on it (``reuse`` holds the
    partitions made before), and simulate the result; solve again on the realised
    partition where it misses the budget, up to ``MAX_ROUNDS`` times in all. Each round
    realises the recomputations of all rounds on ``start``, with ``start``'s chains. A
    round that raises the predicted step peak is not taken: earlier rounds' recomputations
    read what it recomputes, so backward makes it there and holds it longer than the
    solver, which sees only what is still saved, counts."""
    fw_gm, bw_gm, candidates, facts = start.fw_gm, start.bw_gm, start.candidates, start.facts
    earlier = {c.name: c for c in candidates}
    recomputed: dict[str, str] = {}  # name -> reason, over all rounds
    chains: dict[str, list[str]] = {}
    bound, taken = None, None  # after the first round: the peak to hold the plan to; that round's plan
    for round_ in range(MAX_ROUNDS):
        solution = _solve(facts, config, lanes, budget_bytes if bound is None else bound, budget.auto,
                          reuse.memo(facts))
        recompute = [n for n, d in solution.decisions.items() if d == RECOMPUTE]
        if recompute:
            # A value saved in a realised partition is saved in ``start`` too (realising
            # only takes saved values away), with a chain at least as short there.
            chains.update((n, start.facts.chains[n]) for n in recompute)
            views = {n: chain for n, chain in saved_views(joint_gm, start.fw_gm, num_fwd_outputs,
                                                          chains).items()
                     if solution.decisions.get(n, KEEP) == KEEP}
            if views:  # recomputed with what they view, or they would keep its memory
                chains.update(views)
                recompute += list(views)
                joint = {n.name: n for n in joint_gm.graph.nodes}
                solution = dataclasses.replace(
                    solution, decisions={**solution.decisions, **{n: RECOMPUTE for n in views}},
                    reasons={**solution.reasons, **{n: _view_reason(joint, chain) for n, chain in
                                                    views.items()}})
            realised, left_out = reuse.partition(chains)
            if left_out:  # they stay saved (not expected: gathering the facts vetted each chain)
                for n, why in left_out.items():
                    progress.info("offload: %s is kept, not recomputed: %s", n, why)
                    chains.pop(n, None)
                solution = dataclasses.replace(solution, decisions={
                    **solution.decisions, **{n: KEEP for n in left_out}})
            recomputed.update((n, solution.reasons[n]) for n in recompute if n in chains)
            fw_gm, bw_gm, candidates, facts = (realised.fw_gm, realised.bw_gm,
                                               realised.candidates, realised.facts)
            earlier.update((c.name, c) for c in candidates if c.name not in earlier)
        decisions = {n: d for n, d in solution.decisions.items() if d != RECOMPUTE}
        final = final_simulation(facts, decisions, lanes)
        if taken is not None and final.step_peak_bytes > taken.final.step_peak_bytes:
            progress.info("offload: recomputing more (round %d) would lower the activation peak to %s and raise the "
                          "predicted step peak from %s to %s (backward holding recomputations longer): not taken",
                          round_ + 1, *map(nbytes_text, (final.peak_bytes, taken.final.step_peak_bytes,
                                                         final.step_peak_bytes)))
            return taken
        taken = _Realised(fw_gm, bw_gm, candidates, facts, solution, final, *map(dict, (recomputed, earlier, chains)))
        # The realised partition is not the one the solver saw (recomputed ops move into backward, reloads
        # go elsewhere): where it misses the budget ("auto": the solver's peak), solve again on it.
        if bound is None:
            bound = solution.budget_bytes if not budget.auto else solution.result.peak_bytes
        if not recompute or final.peak_bytes <= bound:
            break
    return taken


def _view_reason(joint: dict[str, fx.Node], chain: list[str]) -> str:
    """Why a saved view (``chain``: its view ops, the last reading the value viewed) is
    recomputed; ``joint``: the joint graph's nodes by name."""
    base = joint[chain[-1]].args[0].name
    return (f"{RECOMPUTE.value}: a view of {base}, which is recomputed: saved, it would hold "
            f"{base}'s memory")


def _search_realised(first: _Realised, realise, baseline: SimResult, max_overhead: float,
                     graph_id: int = 0) -> _Realised:
    """``"auto"``: the least realised activation peak whose realised step stays within
    ``max_overhead``, searching over fixed budgets (``AUTO_REALISED_STEPS`` probes,
    :func:`_interpolate`).

    The solver's own search prices a recomputation by its chain in the default
    partition; realised, it often costs less (an op two chains share runs once), so the
    solver's choice is the starting point, not the answer. A probe
    that meets the overhead narrows the search downwards, one that misses it upwards.

    The first probe is the budget next to the solver's plan, at the bisection's
    resolution: the last one its bisection would try if every probe went the way of the
    solver's plan (all over the limit below a plan within it, all within above a plan
    over it), which is how the search usually ends. If that probe goes the same way the
    search stops there, with the plan the bisection would have ended with, at one probe
    instead of ``AUTO_REALISED_STEPS``; otherwise the bisection runs as before, between
    it and the other end.
    """
    limit_ms = baseline.step_ms * (1 + max_overhead)
    best = first if first.final.step_ms <= limit_ms else None
    if best is not None:
        lo, hi = first.final.peak_bytes // 2, first.final.peak_bytes
    else:
        lo, hi = first.final.peak_bytes, baseline.peak_bytes

    probe = 0
    points: list[tuple[int, float]] = [(first.final.peak_bytes, first.final.step_ms)]

    def fits(budget: int) -> int | None:
        nonlocal best, probe
        probe += 1
        t0 = time.perf_counter()
        trial = realise(budget)
        within = trial.final.step_ms <= limit_ms
        points.append((trial.final.peak_bytes, trial.final.step_ms))
        progress.info("offload: graph %d: \"auto\" probe %d/%d: budget %s -> peak %s, step %.2f ms "
                 "(%s the limit of %.2f ms), %.1f s", graph_id, probe, AUTO_REALISED_STEPS + 1,
                 nbytes_text(budget), nbytes_text(trial.final.peak_bytes), trial.final.step_ms,
                 "within" if within else "over", limit_ms, time.perf_counter() - t0)
        if not within:
            return None
        if best is None or (trial.final.peak_bytes, trial.final.step_ms) < (
                best.final.peak_bytes, best.final.step_ms):
            best = trial
        return min(budget, trial.final.peak_bytes)

    first_within = best is not None
    edge = edge_budget(lo, hi, AUTO_REALISED_STEPS, all_miss=first_within)
    upper = fits(edge)
    if first_within and upper is not None:  # a lower peak within the limit: search below it
        interpolate_budgets(lo, upper, AUTO_REALISED_STEPS, fits, points, limit_ms, (hi - lo) >> AUTO_REALISED_STEPS)
    elif not first_within and upper is None:  # still over: search above it
        points.append((baseline.peak_bytes, baseline.step_ms))  # nothing moved: within
        interpolate_budgets(edge, hi, AUTO_REALISED_STEPS, fits, points, limit_ms, (hi - lo) >> AUTO_REALISED_STEPS)
    else:
        progress.info("offload: graph %d: \"auto\": %s; no further probes", graph_id,
                      "the budget just below the plan's peak is over the limit too" if first_within
                      else "the budget just above the plan's peak is within the limit")
    if best is None:  # nothing moved is always within the overhead
        best = realise(baseline.peak_bytes)
    return best


def _simulate(plan: GraphPlan, facts: Facts, baseline: SimResult, lanes: Lanes, cost: NodeCosts,
              corrections: Corrections, budget_bytes: int | None = None) -> SimResult:
    """Simulate the plan's decisions; attach the timeline, the predictions and the
    hardware profile they were costed with (and the corrections, if measured)."""
    plan.hardware = dataclasses.asdict(cost.hw)
    if corrections != Corrections():
        plan.corrections = dataclasses.asdict(corrections)
    decisions = {d.name: d.decision for d in plan.decisions}
    final = final_simulation(facts, decisions, lanes)
    plan.simulation, plan.baseline_simulation = final, baseline
    plan.resimulate = resimulation(facts, decisions, lanes, final)
    plan.predicted = Predictions.of(baseline, final, budget_bytes, facts.compute_ms(), corrections.unmodelled_bytes,
                                    facts.kernels())
    return final


def _device_of(candidates: list[Candidate], devices: tuple[str, ...]) -> str:
    """The device the plan is for: the first saved activation on an allowed device."""
    for c in candidates:
        if c.device.split(":")[0] in devices:
            return c.device
    return "cpu"
