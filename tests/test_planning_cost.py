"""What makes planning cheaper changes no plan: the fast simulator against its
reference, the solver's memo of simulations against fresh ones, and bounds on the work
the planner does on the small GPT (counts, never times)."""

from __future__ import annotations

import dataclasses
import random

import pytest

from offload_compiler.decision import KEEP, OFFLOAD, RECOMPUTE, Decision
from offload_compiler.planning.simulator import Lanes, SimResult, SimTensor, simulate
from offload_compiler.planning.step_peak import Transient

from reference_simulator import simulate_reference

MB = 10**6


def _random_step(rng: random.Random, *, backwards_time: bool = False, chained: bool = False):
    """A random step: ops, tensors with every decision, fixed points on some, groups,
    backward outputs, slowed ops and transients. ``backwards_time``: some ops last less
    than nothing, so memory changes come out of time order (hand-made inputs only).
    ``chained``: some steps are one call of a chain (``Lanes.chained``), a few of them
    with a previous call given."""
    n_fw, n_bw = rng.randint(1, 30), rng.randint(1, 40)

    def ms() -> float:
        return rng.choice([0.0, 0.0, rng.random(), rng.random() * 10, float(rng.randint(1, 5))])

    fw = [ms() for _ in range(n_fw)]
    bw = [ms() for _ in range(n_bw)]
    if backwards_time:
        bw[rng.randrange(n_bw)] = -rng.random()
    tensors = []
    for j in range(rng.randint(0, 12)):
        produced = rng.randrange(n_fw)
        last_fw = rng.randint(produced, n_fw - 1)
        first_bw = rng.randrange(n_bw)
        last_bw = rng.randint(first_bw, n_bw - 1)
        decision = rng.choice(list(Decision))
        group = rng.choice(["", "", "g1", "g2"])
        rc = ms()
        tensors.append(SimTensor(
            f"t{j}", rng.choice([0, MB, 3 * MB, rng.randint(1, 20 * MB)]), produced, last_fw,
            first_bw, last_bw, decision, rc,
            release_after=rng.choice([None, None, rng.randrange(n_fw)]) if decision == OFFLOAD else None,
            reload_before=rng.choice([None, None, rng.randrange(n_bw)]) if decision == OFFLOAD else None,
            group=group, shared_ms=rng.random() * rc if group else 0.0))
    lanes = Lanes(d2h_gbps=rng.choice([0.5, 1.0, 7.0]), h2d_gbps=rng.choice([0.5, 1.0, 7.0]),
                  lead=rng.choice([0.0, 0.5]), compute_slowdown=rng.choice([0.0, 0.037, 0.3]),
                  chained=chained and rng.random() < 0.5)
    kwargs = {}
    if lanes.chained and rng.random() < 0.3:
        kwargs["previous"] = SimResult(
            step_ms=0.0, fw_ms=0.0, bw_ms=0.0, stall_ms=0.0, peak_bytes=0, peak_time_ms=0.0,
            end_of_forward_bytes=0, d2h_spill_ms=rng.choice([0.0, rng.random() * 10]),
            carried_bytes=rng.choice([0, MB, 7 * MB]),
            prefetch_lead_ms=rng.choice([0.0, rng.random() * 5, float("inf")]))
    if rng.random() < 0.6:
        kwargs["bw_out_bytes"] = [rng.choice([0, 0, MB, 5 * MB]) for _ in range(n_bw)]
    if rng.random() < 0.6:
        kwargs["slowed"] = ([rng.random() < 0.5 for _ in range(n_fw)],
                            [rng.random() < 0.5 for _ in range(n_bw)])
    if rng.random() < 0.4:
        n = n_fw + n_bw
        spans = []
        for _ in range(rng.randint(0, 10)):
            first = rng.randrange(n)
            spans.append(Transient(rng.choice([MB, 2 * MB]), first, rng.randint(first, n - 1),
                                   key=rng.choice(["", "bf16:1", "bf16:2"]),
                                   allocates=rng.random() < 0.5, pooled=rng.random() < 0.5))
        kwargs["transients"] = spans
    kwargs["record"] = rng.random() < 0.5
    return fw, bw, tensors, lanes, kwargs


@pytest.mark.parametrize("backwards_time", [False, True])
def test_fast_simulator_matches_the_reference_field_for_field(backwards_time):
    """The simulator, rewritten to do per op only what that op needs, gives every field
    the reference (the simulator before the rewrite) gives, floats bit for bit, on
    random steps: every decision, fixed release and reload points, shared
    recomputation, backward outputs, slowed ops, the step peak, the recorded timeline,
    and chained calls (with and without a previous call given)."""
    rng = random.Random(1234 + backwards_time)
    chained = 0
    for _ in range(400):
        fw, bw, tensors, lanes, kwargs = _random_step(rng, backwards_time=backwards_time, chained=True)
        fast = simulate(fw, bw, tensors, lanes, **kwargs)
        reference = simulate_reference(fw, bw, tensors, lanes, **kwargs)
        assert dataclasses.asdict(fast) == dataclasses.asdict(reference), (fw, bw, tensors, lanes, kwargs)
        chained += lanes.chained and any(x.decision == OFFLOAD for x in tensors)
    assert chained > 100


def test_releases_wait_for_copies_that_finish_out_of_order():
    """A long copy issued first and a short one after it: the short one's release is
    checked at every op while the long one is not done, as the model says."""
    lanes = Lanes(d2h_gbps=1.0, h2d_gbps=1.0, lead=0.5)
    tensors = [SimTensor("long", 8 * MB, 0, 0, 3, 3, OFFLOAD),
               SimTensor("short", MB, 1, 1, 2, 3, OFFLOAD),
               SimTensor("fixed", MB, 1, 1, 1, 2, OFFLOAD, release_after=4),
               SimTensor("kept", 2 * MB, 2, 5, 0, 3, KEEP),
               SimTensor("again", MB, 2, 2, 0, 1, RECOMPUTE, 0.5)]
    fw, bw = [1.0, 1.0, 2.0, 3.0, 1.0, 1.0, 4.0], [1.0, 2.0, 1.0, 1.0]
    for chained in (False, True):
        for record in (False, True):
            lanes = dataclasses.replace(lanes, chained=chained)
            fast = simulate(fw, bw, tensors, lanes, record=record)
            assert dataclasses.asdict(fast) == dataclasses.asdict(
                simulate_reference(fw, bw, tensors, lanes, record=record))
        assert fast.release_after["fixed"] == 4
        assert fast.release_after["short"] < fast.release_after["long"]


def _random_problem(rng: random.Random):
    from offload_compiler.planning.solver import Option

    fw, bw, tensors, lanes, kwargs = _random_step(rng)
    tensors = [dataclasses.replace(x, decision=KEEP, release_after=None, reload_before=None)
               for x in tensors]
    options = {x.name: Option(can_offload=rng.random() < 0.8, can_recompute=rng.random() < 0.6)
               for x in tensors}
    extra = {k: kwargs[k] for k in ("bw_out_bytes", "slowed") if k in kwargs}
    return fw, bw, tensors, options, lanes, extra


def test_memo_holds_what_a_fresh_simulation_gives():
    """Every result the solver's memo keeps is, field for field, what simulating its
    decision set afresh gives."""
    from offload_compiler.planning.solver import SimMemo, solve

    rng = random.Random(7)
    checked = 0
    for _ in range(40):
        fw, bw, tensors, options, lanes, extra = _random_problem(rng)
        memo = SimMemo()
        solve(fw, bw, tensors, options, lanes, budget_bytes=None, max_overhead=0.2, memo=memo, **extra)
        assert memo.misses == len(memo.results)
        for key, result in memo.results.items():
            fresh = simulate(fw, bw, [dataclasses.replace(x, decision=d) for x, d in zip(tensors, key)],
                             lanes, **extra)
            assert dataclasses.asdict(result) == dataclasses.asdict(fresh)
            checked += 1
    assert checked > 200


def test_solves_sharing_a_memo_decide_as_fresh_ones():
    """Solves of one problem at several budgets, sharing one memo (as ``"auto"``'s probes
    do), return what each returns alone: decisions, reasons and predictions."""
    from offload_compiler.planning.solver import SimMemo, solve

    rng = random.Random(11)
    for _ in range(25):
        fw, bw, tensors, options, lanes, extra = _random_problem(rng)
        total = sum(x.nbytes for x in tensors)
        memo = SimMemo()
        for budget, for_auto in ((None, False), (total // 2, True), (total // 3, False), (0, False)):
            kw = dict(budget_bytes=budget, max_overhead=0.1, for_auto=for_auto, **extra)
            shared = solve(fw, bw, tensors, options, lanes, memo=memo, **kw)
            alone = solve(fw, bw, tensors, options, lanes, **kw)
            assert dataclasses.asdict(shared) == dataclasses.asdict(alone)
        assert memo.hits > 0


def test_memo_refuses_another_problem():
    from offload_compiler.planning.solver import SimMemo, solve

    rng = random.Random(3)
    memo = SimMemo()
    fw, bw, tensors, options, lanes, extra = _random_problem(rng)
    solve(fw, bw, tensors, options, lanes, budget_bytes=None, max_overhead=0.1, memo=memo, **extra)
    with pytest.raises(ValueError, match="another problem"):
        solve([x + 1.0 for x in fw], bw, tensors, options, lanes, budget_bytes=None,
              max_overhead=0.1, memo=memo, **extra)


def _small_gpt():
    import torch

    from offload_compiler.models.gpt import GPT, make_batch, preset

    torch.manual_seed(0)
    cfg = preset("tiny", n_layers=4)
    return GPT(cfg), make_batch(cfg)


def test_auto_simulates_no_plan_twice_on_one_partition(monkeypatch):
    """Planning the small GPT at ``"auto"`` (the solver's bisection, then four probes,
    each solving the default partition again) simulates each decision set at most once
    per partition: 776 simulations, where it ran 2054 before the memo."""
    import torch

    from helpers import backend, loopback
    from offload_compiler.planning import solver

    seen: list[tuple[int, tuple]] = []
    simulate_ = solver.simulate

    def counted(fw_ms, bw_ms, tensors, lanes, **kwargs):
        seen.append((id(fw_ms), tuple(x.decision for x in tensors)))
        return simulate_(fw_ms, bw_ms, tensors, lanes, **kwargs)

    monkeypatch.setattr(solver, "simulate", counted)
    model, inputs = _small_gpt()
    b = backend(**loopback(policy="cost_model", inner_compiler="eager", memory_budget="auto",
                           min_offload_bytes=0))
    torch.compile(model, backend=b)(*inputs).backward()
    assert b.plans and b.plans[0].recomputed  # the probes realised recomputations
    assert len(seen) == len(set(seen))
    assert len(seen) <= 1000


@pytest.mark.parametrize("budget", ["auto", 0.2])
def test_min_cut_runs_once_per_compile_and_recomputation_is_realised_without_it(monkeypatch, budget):
    """The planner realises recomputation on min-cut's partition
    (``passes.recompute_saved``), never by running min-cut again: one min-cut per
    compile, at ``"auto"`` (its probes) and at a fixed budget, and the plan recomputes
    in backward what it says it recomputes; gradients bitwise equal to eager's."""
    import torch

    from helpers import backend, loopback
    from offload_compiler import partitioner
    from offload_compiler.decision import RECOMPUTE

    min_cuts = []
    partition = partitioner._partition
    monkeypatch.setattr(partitioner, "_partition", lambda *a: min_cuts.append(1) or partition(*a))
    torch._dynamo.reset()
    model, inputs = _small_gpt()
    model(*inputs).backward()
    expected = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    b = backend(**loopback(policy="cost_model", inner_compiler="eager", memory_budget=budget,
                           min_offload_bytes=0, plan_cache=False))
    torch.compile(model, backend=b)(*inputs).backward()
    (plan,) = b.plans
    recomputed = {d.name for d in plan.decisions if d.decision == RECOMPUTE}
    assert recomputed and plan.recomputed and len(min_cuts) == 1
    (fw_out,) = plan.fw_graph.graph.find_nodes(op="output")
    saved = {a.name for a in fw_out.args[0] if isinstance(a, torch.fx.Node)}
    bw_inputs = {n.name for n in plan.bw_graph.graph.find_nodes(op="placeholder")}
    assert not recomputed & saved and not recomputed & bw_inputs
    assert all(torch.equal(p.grad, e) for p, e in zip(model.parameters(), expected))


def test_a_realised_partition_is_reused_for_the_same_recomputations(monkeypatch):
    """``reuse.Reuse``: each set of recomputed values is realised once; asked again for
    a set it has seen (in any order), it hands back the same partition and facts."""
    import torch.fx as fx

    from offload_compiler.planning import reuse as planning_reuse

    made = []

    def realise(joint, start, n, chains, analyze):
        made.append(sorted(chains))
        return planning_reuse.Partition(f"fw{len(made)}", f"bw{len(made)}", []), {}

    monkeypatch.setattr(planning_reuse, "realise", realise)
    start = planning_reuse.Partition("fw0", "bw0", [])
    reuse = planning_reuse.Reuse(fx.GraphModule({}, fx.Graph()), start, 1, lambda fw, bw: [],
                                 lambda fw, bw, c: f"facts of {fw}")
    first, left_out = reuse.partition({"a": ["a"], "b": ["b"]})
    assert (first.fw_gm, first.facts, left_out) == ("fw1", "facts of fw1", {})
    other, _ = reuse.partition({"a": ["a"]})
    assert other.fw_gm == "fw2" and len(made) == 2
    again, _ = reuse.partition({"b": ["b"], "a": ["a"]})
    assert again is first and len(made) == 2 and reuse.partitions_reused == 1
    assert reuse.memo(first.facts) is reuse.memo(first.facts)
    assert reuse.memo(first.facts) is not reuse.memo(other.facts)


def test_the_partitioner_generates_no_code_and_its_modules_have_their_graphs_code(monkeypatch):
    """The partitions ``"auto"``'s probes realise (one is taken), min-cut's own (taken
    with ``policy="all"``) and the offload passes, each changing graphs, generate no
    Python code: their modules are lazy (``partitioner._lazy_modules``,
    ``_as_lazy``); what code the partitioner generates, min-cut generates (torch's own,
    as under Inductor). The modules the partitioner hands
    Inductor have the code of their final graph when it is read. The plan, its graphs'
    code and the gradients are those of a compile with Dynamo's
    ``use_lazy_graph_module`` off, where every change generates the code."""
    import torch

    from helpers import backend, loopback

    from offload_compiler import partitioner

    generated = []
    python_code = torch.fx.Graph.python_code
    monkeypatch.setattr(torch.fx.Graph, "python_code",
                        lambda self, *a, **k: generated.append(1) or python_code(self, *a, **k))
    inside, in_min_cut, stale = [], [], []
    partition_and_plan = partitioner.OffloadPartitioner._partition_and_plan
    min_cut = partitioner._partition

    def counted(*args):
        before = len(generated)
        out = min_cut(*args)
        in_min_cut.append(len(generated) - before)
        return out

    def checked(self, *args, **kwargs):
        before = len(generated)
        fw_gm, bw_gm = partition_and_plan(self, *args, **kwargs)
        inside.append(len(generated) - before - sum(in_min_cut))
        for gm in (fw_gm, bw_gm):
            stale.append(gm.code != python_code(gm.graph, "self").src)
        return fw_gm, bw_gm

    monkeypatch.setattr(partitioner.OffloadPartitioner, "_partition_and_plan", checked)
    monkeypatch.setattr(partitioner, "_partition", counted)

    def plan(policy, budget):
        torch._dynamo.reset()
        inside.clear()
        in_min_cut.clear()
        stale.clear()
        model, inputs = _small_gpt()
        b = backend(**loopback(policy=policy, inner_compiler="eager", memory_budget=budget,
                               min_offload_bytes=0, plan_cache=False))
        torch.compile(model, backend=b)(*inputs).backward()
        (p,) = b.plans
        grads = [q.grad.clone() for q in model.parameters()]
        return ([(d.name, d.decision) for d in p.decisions], p.predicted, p.fw_graph.code,
                p.bw_graph.code, p.recomputed), grads, list(inside)

    for policy, budget in (("cost_model", "auto"), ("cost_model", 0.2), ("all", "auto")):
        lazy, grads, generated_lazy = plan(policy, budget)
        assert bool(lazy[-1]) == (policy == "cost_model")  # realised; "all": min-cut's
        assert stale and not any(stale)
        with torch._dynamo.config.patch(use_lazy_graph_module=False):
            eager, eager_grads, generated_eager = plan(policy, budget)
        assert lazy == eager and not any(stale)
        assert all(torch.equal(a, b) for a, b in zip(grads, eager_grads))
        assert generated_lazy == [0] and generated_eager[0] > 0


