"""The cost-model planner on real graphs (CPU loopback, fixed CPU hardware profile)."""

import functools

from types import SimpleNamespace

import pytest
import torch
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

from offload_compiler.models.gpt import GPT, make_batch, preset
from helpers import assert_bitwise, assert_close, backend, counts, loopback, train
from models import Dropout

aten = torch.ops.aten


def _gpt(dropout=0.0):
    torch.manual_seed(0)
    # Four layers: at 0.2 of a two-layer model the budget falls below what backward
    # needs at once in one MLP (its up-projection and GELU outputs), which no plan avoids.
    cfg = preset("tiny", n_layers=4, dropout=dropout)
    return GPT(cfg), make_batch(cfg)


def _cost_model(**options):
    return backend(**loopback(**{"policy": "cost_model", "inner_compiler": "eager", **options}))


def _plan(model, inputs, **options):
    b = _cost_model(**options)
    torch.compile(model, backend=b)(*inputs).backward()
    (plan,) = b.plans
    return plan


@pytest.mark.parametrize("budget", [1.0, 0.5, 0.2])
def test_predicted_peak_within_budget(budget):
    model, inputs = _gpt()
    plan = _plan(model, inputs, memory_budget=budget)
    p = plan.predicted
    assert p["budget_bytes"] == int(budget * p["baseline_activation_peak_bytes"])
    assert p["activation_peak_bytes"] <= p["budget_bytes"], plan.summary()
    assert all(d.reason for d in plan.decisions)


def test_tight_budget_uses_all_three_decisions():
    model, inputs = _gpt()
    plan = _plan(model, inputs, memory_budget=0.2)
    kinds = {d.decision.value for d in plan.decisions}
    assert kinds == {"keep", "offload", "recompute"}, plan.summary()
    for d in plan.decisions:
        assert d.reason.startswith(d.decision.value + ":"), (d.decision, d.reason)


def test_tensors_under_min_offload_bytes_are_neither_offloaded_nor_recomputed():
    """``min_offload_bytes`` keeps small tensors in place under the cost model too:
    recomputing one saves next to nothing and may cost a kernel."""
    model, inputs = _gpt()
    floor = 16 << 10
    plan = _plan(model, inputs, memory_budget="auto", min_offload_bytes=floor)
    small = [d for d in plan.decisions if 0 < d.nbytes < floor and d.producer != "placeholder"
             and d.dtype.startswith(("float", "bfloat"))]
    assert small, plan.summary()
    for d in small:
        assert d.decision.value == "keep", (d.name, d.reason)
        assert f"min_offload_bytes={floor}" in d.reason, d.reason
    assert any(d.decision.value != "keep" for d in plan.decisions if d.nbytes >= floor)


def test_budget_one_changes_nothing():
    model, inputs = _gpt()
    plan = _plan(model, inputs, memory_budget=1.0)
    ref = _plan(model, inputs, policy="none")
    assert counts(plan.fw_graph) == {"d2h": 0, "release": 0, "h2d": 0, "wait": 0}
    assert plan.fw_graph.code == ref.fw_graph.code
    assert plan.bw_graph.code == ref.bw_graph.code


def test_byte_budget_and_auto():
    model, inputs = _gpt()
    auto = _plan(model, inputs)  # memory_budget="auto"
    p = auto.predicted
    assert p["step_ms"] <= p["baseline_step_ms"] * 1.03 + 1e-9
    assert p["activation_peak_bytes"] < p["baseline_activation_peak_bytes"]
    torch._dynamo.reset()
    nbytes = int(p["baseline_activation_peak_bytes"] * 0.6)
    plan = _plan(model, inputs, memory_budget=f"{nbytes}B")
    assert plan.predicted["budget_bytes"] == nbytes
    assert plan.predicted["activation_peak_bytes"] <= nbytes


def test_auto_searches_realised_partitions_within_its_overhead(monkeypatch):
    """The probes on realised partitions keep the step within ``max_overhead`` and find
    no higher peak than the solver's own choice, realised (no probes)."""
    from offload_compiler.planning import search as partitioner

    model, inputs = _gpt()
    probes = []
    realise = partitioner._realise

    def counted(*args):
        out = realise(*args)
        probes.append((args[-1], out.final.peak_bytes, out.final.step_ms))
        return out

    monkeypatch.setattr(partitioner, "_realise", counted)
    searched = _plan(model, inputs, max_overhead=0.05).predicted
    assert 2 <= len(probes) <= 2 + partitioner.AUTO_REALISED_STEPS
    assert probes[0][0] is None and all(b is not None for b, _, _ in probes[1:])
    limit = searched["baseline_step_ms"] * 1.05
    assert searched["step_ms"] <= limit + 1e-9
    # The plan is the least peak among the probes that kept within the overhead.
    assert searched["activation_peak_bytes"] == min(p for _, p, s in probes if s <= limit + 1e-9)
    torch._dynamo.reset()
    monkeypatch.setattr(partitioner, "AUTO_REALISED_STEPS", 0)
    alone = _plan(model, inputs, max_overhead=0.05).predicted
    assert searched["activation_peak_bytes"] <= alone["activation_peak_bytes"]


def test_impossible_budget_is_best_effort_and_said():
    model, inputs = _gpt()
    plan = _plan(model, inputs, memory_budget="1B")  # one byte
    assert "not reachable" in plan.note and "not reachable" in plan.summary()


@pytest.mark.parametrize("budget", [0.5, 0.2, "auto"])
def test_dropout_gradients_bitwise_at_every_budget(budget):
    model, inputs = _gpt(dropout=0.2)
    ref = train(model, inputs, backend(**loopback(inner_compiler="eager", policy="none")))
    got = train(model, inputs, _cost_model(memory_budget=budget))
    assert_bitwise(ref, got)


def test_dropout_never_recomputed():
    torch.manual_seed(0)
    model, x = Dropout(), torch.randn(64, 32)
    plan = _plan(model, (x,), memory_budget=0.05)
    for d in plan.decisions:
        if d.decision.value == "recompute":
            assert "dropout" not in d.producer
    reasons = " ".join(d.reason for d in plan.decisions)
    assert "random op" in reasons


def test_inductor_gradients_within_tolerance_at_tight_budget():
    model, inputs = _gpt()
    ref = train(model, inputs, backend(**loopback(policy="none")))
    b = backend(**loopback(policy="cost_model", memory_budget=0.2))
    got = train(model, inputs, b)
    assert b.plans[0].offloaded and b.plans[0].recomputed
    assert_close(ref, got, rtol=1e-5, atol=1e-6)


class SACBlock(torch.nn.Module):
    """An MLP under selective activation checkpointing with a user policy."""

    def __init__(self, policy):
        super().__init__()
        self.fc1 = torch.nn.Linear(32, 128)
        self.fc2 = torch.nn.Linear(128, 32)
        self.policy = policy

    def _inner(self, x):
        return self.fc2(torch.relu(self.fc1(x)).sin())

    def forward(self, x):
        ctx = functools.partial(create_selective_checkpoint_contexts, self.policy)
        return checkpoint(self._inner, x, use_reentrant=False, context_fn=ctx).square().mean()


def _policy(tag_for_mm):
    def policy(ctx, op, *args, **kwargs):
        if op in (aten.mm.default, aten.addmm.default):
            return tag_for_mm
        return CheckpointPolicy.PREFER_RECOMPUTE
    return policy


def test_user_must_save_tags_are_honoured():
    torch.manual_seed(0)
    model, x = SACBlock(_policy(CheckpointPolicy.MUST_SAVE)), torch.randn(64, 32)
    plan = _plan(model, (x,), memory_budget=0.01)
    addmm = [d for d in plan.decisions if d.producer.startswith("aten.addmm")]
    assert addmm
    for d in addmm:
        assert d.decision.value == "keep" and "checkpoint tag" in d.reason
    assert "not reachable" in plan.note  # the tags, not the planner, held the memory
    # "auto" probes several budgets on the joint graph, tagging and untagging it: the
    # user's tags hold in the plan it keeps.
    torch._dynamo.reset()
    plan = _plan(model, (x,), memory_budget="auto", max_overhead=0.5)
    addmm = [d for d in plan.decisions if d.producer.startswith("aten.addmm")]
    assert addmm and all(d.decision.value == "keep" and "checkpoint tag" in d.reason for d in addmm)


def test_user_must_cpu_offload_tags_are_honoured():
    torch.manual_seed(0)
    model, x = SACBlock(_policy(CheckpointPolicy.MUST_CPU_OFFLOAD)), torch.randn(64, 32)
    plan = _plan(model, (x,), memory_budget=1.0)  # the budget alone would change nothing
    addmm = [d for d in plan.decisions if d.producer.startswith("aten.addmm")]
    assert addmm and all(d.decision.value == "offload" for d in addmm)
    ref = train(model, (x,), backend(**loopback(inner_compiler="eager", policy="none")))
    got = train(model, (x,), _cost_model(memory_budget=1.0))
    assert_bitwise(ref, got)


def test_profiling_mode_on_cpu_graphs_estimates():
    """``node_costs="profile"`` times CUDA kernels only; a CPU plan is the estimate's."""
    model, inputs = _gpt()
    a = _plan(model, inputs, memory_budget=0.5, node_costs="profile")
    b = _plan(model, inputs, memory_budget=0.5)
    assert a.predicted == b.predicted
    assert [d.decision for d in a.decisions] == [d.decision for d in b.decisions]


@pytest.mark.parametrize("budget", [0.5, 0.2, "auto"])
def test_reloads_are_anchored_where_planned_not_hoisted_to_the_top(budget):
    """A reload without an anchor is issued at the top of backward (Inductor hoists it
    there), ahead of every anchored reload on the one H2D stream: only reloads needed
    before every anchored one may go there (the first reloads, planned at the top).
    (Regression: a planned issue point right after the previous reload's wait left the
    reload unanchored, ahead of reloads needed sooner.)"""
    from offload_compiler.runtime import ops

    model, inputs = _gpt()
    plan = _plan(model, inputs, memory_budget=budget)
    nodes = list(plan.bw_graph.graph.nodes)
    h2ds = [n for n in nodes if n.target is ops.H2D]
    assert h2ds
    first_use = {h2d: min(nodes.index(u) for u in h2d.users if u.target is ops.WAIT) for h2d in h2ds}
    by_use = sorted(h2ds, key=first_use.get)
    unanchored = [h2d.args[1] is None for h2d in by_use]
    assert unanchored == sorted(unanchored, reverse=True), [(h.name, h.args[1]) for h in by_use]


def _first_facts(monkeypatch, **options):
    """What the solver was first given planning the four-layer GPT with ``options``."""
    from offload_compiler.planning import search

    seen = []
    solve = search._solve

    def spy(facts, *args):
        seen.append(facts)
        return solve(facts, *args)

    monkeypatch.setattr(search, "_solve", spy)
    model, inputs = _gpt()
    _plan(model, inputs, **options)
    return seen[0]


def test_each_saved_value_names_the_recomputations_whose_chains_read_it(monkeypatch):
    """``read_by``: recomputing a value whose chain reads another recomputed value makes
    that one where the first of them is made (``planning/nested.py``); the facts say
    which chains read which saved value, as the chains themselves do."""
    facts = _first_facts(monkeypatch, memory_budget=0.5)
    names = {x.name for x in facts.tensors}
    nodes = {n.name: n for n in facts.fw_nodes}
    expected = {x: set() for x in names}
    for reader, chain in facts.chains.items():
        for op in chain:
            for arg in nodes[op].all_input_nodes if op in nodes else ():
                if arg.name in names and arg.name not in chain:
                    expected[arg.name].add(reader)
    got = {x.name: set(x.read_by) for x in facts.tensors}
    assert got == expected
    # The residual stream read by the next layer's chains, q, k and v by the attention's...
    assert sum(map(len, got.values())) >= 4 * 8


def test_q_k_v_share_their_projection_when_recomputed(monkeypatch):
    """q, k and v are views of one projection: recomputing all three runs its matmul
    once, so the simulator charges that matmul to the first of them only."""
    facts = _first_facts(monkeypatch, memory_budget=0.5)
    groups = {}
    for x in facts.tensors:
        if x.group:
            groups.setdefault(x.group, []).append(x)
    mm_groups = [g for k, g in groups.items() if k.startswith("mm")]
    assert len(mm_groups) == 4, groups.keys()  # one qkv projection per layer
    for members in mm_groups:
        assert len(members) == 3
        for x in members:
            assert 0 < x.shared_ms < x.recompute_ms
            assert x.shared_ms == members[0].shared_ms


def test_plan_offline_plans_without_running_the_model(tmp_path):
    """``benchmarks/plan_offline.py`` stops compilation once the planner has decided and
    reports its predictions per budget."""
    import importlib.util
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "plan_offline.py"
    spec = importlib.util.spec_from_file_location("plan_offline", path)
    plan_offline = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plan_offline)
    out = tmp_path / "rows.json"
    import os

    env_before = dict(os.environ)
    # The tiny preset's activations are all under the default 1 MiB floor.
    assert plan_offline.main(["--preset", "tiny", "--budgets", "1.0,0.3", "--out", str(out),
                              "--options", '{"min_offload_bytes": 0}']) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["budget"] for r in rows] == ["1.0", "0.3"]
    full, tight = rows
    assert full["recompute_gib"] == 0 and full["offload_gib"] == 0
    assert tight["activation_gib"] <= 0.3 * tight["baseline_gib"] + 1e-9 or tight["note"]
    assert tight["offload_gib"] + tight["recompute_gib"] > 0
    # It turns the plan cache off for its own plans, not for the process it runs in.
    assert dict(os.environ) == env_before



def test_copies_slow_memory_bound_ops_not_matmuls(monkeypatch):
    from offload_compiler.planning import search as planner
    from passes.nodes import is_extern

    seen = []
    gather = planner.gather
    monkeypatch.setattr(planner, "gather", lambda *a, **k: seen.append(gather(*a, **k)) or seen[-1])
    model, inputs = _gpt()
    _plan(model, inputs, memory_budget=0.5)
    facts = seen[0]
    fw_slowed, bw_slowed = facts.slowed
    assert len(fw_slowed) == len(facts.fw_nodes) and len(bw_slowed) == len(facts.bw_nodes)
    mms = [i for i, n in enumerate(facts.fw_nodes) if n.target in (aten.mm.default, aten.addmm.default)]
    assert mms and not any(fw_slowed[i] for i in mms)
    assert all(s == (not is_extern(n)) for n, s in zip(facts.bw_nodes, bw_slowed))
    assert any(fw_slowed)


@pytest.mark.parametrize("inner, pooled", [("eager", False), ("inductor", True)])
def test_only_inductors_graphs_are_planned_with_its_buffer_pool(monkeypatch, inner, pooled):
    # The eager inner compiler runs the FX graph, which frees each value after its last
    # use: no value waits in a pool for a later buffer of its size, so the step peak
    # replays none (it did until session 37, and predicted more than such a step holds).
    from offload_compiler.planning import search as planner

    seen = []
    gather = planner.gather
    monkeypatch.setattr(planner, "gather", lambda *a, **k: seen.append(gather(*a, **k)) or seen[-1])
    model, inputs = _gpt()
    _plan(model, inputs, memory_budget=0.5, inner_compiler=inner)
    transients = seen[0].transients
    assert transients and any(t.first < t.last for t in transients)
    assert any(t.pooled and t.key for t in transients) == pooled
    if not pooled:
        assert not any(t.key for t in transients)


def _realised(peak: int, step_ms: float):
    return SimpleNamespace(final=SimpleNamespace(peak_bytes=peak, step_ms=step_ms))


def _old_search(first, realise, limit_ms, lo, hi):
    """``"auto"``'s search on realised partitions before session 12: a plain bisection."""
    from offload_compiler.planning.solver import bisect_budgets
    from offload_compiler.planning.search import AUTO_REALISED_STEPS

    best = [first if first.final.step_ms <= limit_ms else None]

    def fits(budget):
        trial = realise(budget)
        if trial.final.step_ms > limit_ms:
            return None
        if best[0] is None or trial.final.peak_bytes < best[0].final.peak_bytes:
            best[0] = trial
        return min(budget, trial.final.peak_bytes)

    bisect_budgets(lo, hi, AUTO_REALISED_STEPS, fits)
    return best[0]


@pytest.mark.parametrize("first_peak, threshold, probes", [
    (600, 590, 1),   # within; the budget just below is over: the solver's plan stands
    (600, 350, 5),   # within; much lower budgets are within too: bisect below
    (400, 410, 1),   # over; the budget just above is within: that one
    (400, 700, 5),   # over; far above only: bisect above
])
def test_auto_probes_next_to_the_solver_plan_first(first_peak, threshold, probes):
    """The realised step falls as the peak rises (over the limit below ``threshold``
    bytes). Where the probe next to the solver's plan goes the plan's way, one probe
    gives the plan the plain bisection ends with; otherwise it bisects."""
    from offload_compiler.planning.search import AUTO_REALISED_STEPS, _search_realised

    limit_ms, baseline = 10.0, SimpleNamespace(step_ms=10.0 / 1.03, peak_bytes=1000)
    tried = []

    def realise(budget):
        tried.append(budget)
        return _realised(budget, 9.0 if budget >= threshold else 11.0)

    first = _realised(first_peak, 9.0 if first_peak >= threshold else 11.0)
    got = _search_realised(first, realise, baseline, 0.03)
    assert len(tried) == probes
    assert got.final.step_ms <= limit_ms
    lo, hi = (first_peak // 2, first_peak) if first_peak >= threshold else (first_peak, 1000)
    old = _old_search(first, realise, limit_ms, lo, hi)
    if probes == 1:
        assert got.final.peak_bytes == old.final.peak_bytes
    else:  # the bisection's resolution, as before (its grid moves with the edge probe)
        assert 0 <= got.final.peak_bytes - threshold <= (hi - lo) / 2 ** AUTO_REALISED_STEPS
        assert 0 <= old.final.peak_bytes - threshold <= (hi - lo) / 2 ** AUTO_REALISED_STEPS


@pytest.mark.parametrize("first_peak, threshold, tries", [
    (6000, 4750, 2),  # within: the edge probe and the line through it and the plan
    (3000, 4750, 3),  # over: the line to nothing moved (not on the line) first, then this one
])
def test_auto_tries_where_the_realised_step_reaches_the_limit(first_peak, threshold, tries):
    """The realised step rises as the peak falls, on a line through the limit at
    ``threshold`` bytes (HF Llama's realised plans planned on a CPU: 3 us per MiB).
    Each try after the one next to the solver's plan is where the line through the
    plans seen so far meets the limit: two or three tries where the bisection took
    five, and the same answer to within the bisection's resolution."""
    from offload_compiler.planning.search import AUTO_REALISED_STEPS, _search_realised

    limit_ms, baseline = 10.0, SimpleNamespace(step_ms=10.0 / 1.03, peak_bytes=10000)

    def step(peak):
        return limit_ms + (threshold - peak) * 1e-3

    tried = []

    def realise(budget):
        tried.append(budget)
        return _realised(budget, step(budget))

    first = _realised(first_peak, step(first_peak))
    got = _search_realised(first, realise, baseline, 0.03)
    lo, hi = (first_peak // 2, first_peak) if first_peak >= threshold else (first_peak, 10000)
    old = _old_search(first, realise, limit_ms, lo, hi)
    assert len(tried) - 5 == tries  # the bisection's five came after
    assert got.final.step_ms <= limit_ms and old.final.step_ms <= limit_ms
    assert 0 <= got.final.peak_bytes - threshold <= (hi - lo) / 2 ** AUTO_REALISED_STEPS


def test_autos_solver_search_tries_where_the_step_meets_the_limit(monkeypatch):
    """The solver's own ``"auto"`` search over fixed budgets tries where the line through
    the plans tried so far meets the step limit, not the bisection's middle from zero:
    the same plan in fewer greedy passes (HF Llama planned on a CPU: 545 simulations
    instead of 936 for the first plan, the same peak; ``benchmarks/RESULTS.md``,
    session 19)."""
    from offload_compiler.planning import solver
    from offload_compiler.planning.budget import interpolate_budgets

    def bisection(lo, hi, steps, fits, points, limit_ms, resolution):
        solver.bisect_budgets(lo, hi, steps, fits, resolution=lambda _hi: resolution)

    runs = []
    greedy = solver._greedy
    monkeypatch.setattr(solver, "_greedy", lambda *a: runs.append(a[1]) or greedy(*a))
    plans = {}
    for name, search in (("bisection", bisection), ("line", interpolate_budgets)):
        monkeypatch.setattr(solver, "interpolate_budgets", search)
        runs.clear()
        model, inputs = _gpt()
        plans[name] = (_plan(model, inputs, memory_budget="auto", replan=False, plan_cache=False), len(runs))
    (bisected, n_bisect), (lined, n_line) = plans["bisection"], plans["line"]
    assert [d.decision for d in lined.decisions] == [d.decision for d in bisected.decisions]
    assert lined.predicted.activation_peak_bytes == bisected.predicted.activation_peak_bytes
    assert n_line < n_bisect, (n_line, n_bisect)
