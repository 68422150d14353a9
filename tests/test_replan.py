"""Re-planning from a measurement and the memory limit, on CPU with injected measurements.

The measurement source (``offload_compiler.runtime.measure.source``) is replaced by one
that reports what each test says the GPU would have measured, relative to the plan's
own predictions; the backend then acts on it as it would on a GPU.
"""

import contextlib
import dataclasses
import logging
import re
import types

import pytest
import torch

from offload_compiler.config import OffloadConfig
from offload_compiler.nbytes import nbytes_text
from offload_compiler.models.gpt import GPT, make_batch, preset
from offload_compiler.planning.judging import held_overhead, tightened, within_margin
from offload_compiler.planning.replan import TOLERANCE, Corrections, MemoryLimitError, corrected, disagreements
from offload_compiler.replanning import MAX_LIMIT_REPLANS, SETTLE_STEPS
from offload_compiler.runtime import host_pool, measure

from helpers import BOTH_READ, KERNELS_AT, KERNELS_READ_AT, MEASURED, READ_AT, FakeSource, as_predicted, assert_bitwise, backend, train

OPTIONS = {"devices": ("cpu",), "inner_compiler": "eager", "min_offload_bytes": 0}


@pytest.fixture
def source():
    installed = []

    def install(make):
        installed.append(FakeSource(make))
        measure.set_source(installed[-1])
        return installed[-1]

    yield install
    measure.set_source(None)


def _model():
    cfg = preset("tiny")
    torch.manual_seed(0)
    return GPT(cfg), make_batch(cfg)


def _run(b, steps):
    model, batch = _model()
    return train(model, batch, b, steps=steps)


def test_settle_steps_until_the_measurements_and_the_re_plan_are_over(source):
    """``backend.settle(step)`` (the harness's and the benchmarks' warm-up): steps until
    every graph is measured and planned again where called for, never more than
    ``SETTLE_STEPS``; none once settled."""
    b = backend(**OPTIONS, memory_budget=0.5)
    source(as_predicted(b.plans, time_scale=2.0))  # measured twice as slow: one re-plan
    torch._dynamo.reset()
    model, batch = _model()
    compiled = torch.compile(model, backend=b)

    def step():
        compiled(*batch).backward()
        model.zero_grad(set_to_none=True)

    step()  # compiles the graph: before it, settled says nothing
    ran = b.settle(step)
    assert b.settled and len(b.plans) == 2 and 0 < ran <= SETTLE_STEPS
    assert b.settle(step) == 0
    waiting = backend(**OPTIONS, memory_budget=0.5)
    torch.compile(_model()[0], backend=waiting)(*batch)  # a graph that is never measured
    assert not waiting.settled and waiting.settle(lambda: None) == SETTLE_STEPS


def test_a_measurement_within_tolerance_changes_nothing(source):
    b = backend(**OPTIONS, memory_budget=0.5)
    fake = source(as_predicted(b.plans))
    _run(b, steps=READ_AT)
    assert fake.asked == MEASURED  # each timing a step after reading the one before
    (plan,) = b.plans
    assert plan.measured is not None and len(plan.measured.timed_ms) == len(MEASURED) - 1
    assert plan.measured.call in [call for call, what in MEASURED if what == "time"]
    assert plan.corrections == {} and plan.replaces is None


def test_the_median_timed_call_is_the_measurement(source, caplog):
    """One timed call can be slowed by work that is not the graph's (a collection, the
    host busy elsewhere), and one can land on the fast edge of the steps' spread: a plan
    is timed on three calls a step apart, and the median is its measurement. Here the
    first timed call is 40% slow, which alone would have called for a re-plan, and the
    last 4% fast; the middle one agrees with the prediction, so nothing changes."""
    b = backend(**OPTIONS, memory_budget=0.5)
    exact = as_predicted(b.plans)
    scale = {3: 1.4, 7: 0.96}

    def make(call):
        m, k = exact(call), scale.get(call, 1.0)
        return dataclasses.replace(m, fw_ms=k * m.fw_ms, bw_ms=k * m.bw_ms)

    fake = source(make)
    with caplog.at_level(logging.INFO, logger="offload_compiler"):
        _run(b, steps=READ_AT + 2)
    assert fake.asked == MEASURED == [(2, "memory"), (3, "time"), (5, "time"), (7, "time")]
    (plan,) = b.plans  # not planned again
    slow, middle, fast = (make(c).step_ms for c in (3, 5, 7))
    assert plan.measured.call == 5 and plan.measured.timed_ms == (slow, middle, fast)
    assert plan.measured.step_peak_bytes == make(2).step_peak_bytes  # the memory call's
    assert f"the median of 3 timed calls: {slow:.2f}, {middle:.2f}, {fast:.2f} ms" in caplog.text
    assert "planning again" not in caplog.text


def test_the_typical_call_is_the_median_or_of_two_the_faster():
    def timed(call, ms):
        return measure.Measured(call=call, fw_ms=ms / 2, bw_ms=ms / 2, stall_ms=0.0)

    assert measure.typical([timed(3, 10.0)]).call == 3
    assert measure.typical([timed(3, 12.0), timed(5, 10.0)]).call == 5
    assert measure.typical([timed(3, 10.0), timed(5, 14.0), timed(7, 11.0)]).call == 7
    assert measure.typical([timed(3, 9.0), timed(5, 10.0), timed(7, 30.0)]).call == 5


def test_a_second_timing_that_measured_nothing_leaves_the_first(source):
    """The second timed call's measurement is missing (its events did not all complete):
    the first timing is the measurement, and nothing is timed again."""
    b = backend(**OPTIONS, memory_budget=0.5)
    exact = as_predicted(b.plans)
    fake = source(lambda call: None if call == 5 else exact(call))
    _run(b, steps=8)
    assert fake.asked == [(2, "memory"), (3, "time"), (5, "time")]
    (plan,) = b.plans
    assert plan.measured.call == 3 and plan.measured.timed_ms == (plan.measured.step_ms,)
    assert plan.measured.step_peak_bytes == exact(2).step_peak_bytes


def test_a_peak_over_the_memory_limit_plans_again_once_and_the_new_plan_fits(source, caplog):
    probe = backend(**OPTIONS, memory_budget=1.0, replan=False)
    _run(probe, steps=1)
    baseline_peak = probe.plans[0].predicted.baseline_step_peak_bytes
    extra = baseline_peak // 3  # what the model does not see (measured)
    limit = baseline_peak + extra // 2  # the unmodified step fits as predicted, not as measured
    b = backend(**OPTIONS, memory_limit=f"{limit}B")
    fake = source(as_predicted(b.plans, peak_extra=extra))
    with caplog.at_level(logging.INFO, logger="offload_compiler"):
        _run(b, steps=BOTH_READ)
    first, second = b.plans  # re-planned once, however many steps follow
    assert first.offloaded == [] and first.recomputed == []  # it fitted as predicted
    assert first.measured.step_peak_bytes == first.predicted.step_peak_bytes + extra
    assert second.replaces == first.graph_id
    assert second.corrections["unmodelled_bytes"] == extra
    assert second.predicted.step_peak_bytes <= limit  # held before: 0 on CPU
    assert second.offloaded or second.recomputed
    assert second.measured is not None  # measured again, for the record
    assert len(fake.asked) == 2 * len(MEASURED)
    assert "planning again from the measurement" in caplog.text
    assert f"step peaks +{nbytes_text(extra)} (what the model does not see)" in caplog.text
    assert "over memory_limit" in caplog.text


def test_slower_compute_than_estimated_corrects_the_times(source):
    b = backend(**OPTIONS, memory_budget=0.5)
    source(as_predicted(b.plans, time_scale=2.0))
    _run(b, steps=READ_AT)
    first, second = b.plans
    p = first.predicted  # the report splits the step into what each part measured
    assert f"forward compute {2 * p.fw_compute_ms:.2f} vs {p.fw_compute_ms:.2f} ms" in first.measured_text()
    assert f"backward compute {2 * p.bw_compute_ms:.2f} vs {p.bw_compute_ms:.2f} ms" in first.measured_text()
    assert second.corrections["fw_scale"] == pytest.approx(2.0, rel=1e-6)
    assert second.corrections["bw_scale"] == pytest.approx(2.0, rel=0.05)
    assert second.predicted.fw_compute_ms == pytest.approx(2 * first.predicted.fw_compute_ms, rel=0.05)


def test_a_new_plan_measured_worse_than_the_one_it_replaced_is_given_up(source, caplog):
    """The first plan measures slower than predicted (a re-plan); the new plan then
    measures slower still, at the same step peak: the graph goes back to the first plan
    and stays there, with gradients as without the backend."""
    def make(call):
        if len(b.plans) == 1:
            return as_predicted(b.plans, time_scale=2.0)(call)
        first = b.plans[0].measured
        return dataclasses.replace(first, call=call, fw_ms=first.fw_ms * 1.5, bw_ms=first.bw_ms * 1.5)

    model, batch = _model()
    reference = train(model, batch, backend(**OPTIONS, policy="none", replan=False), steps=BOTH_READ)
    b = backend(**OPTIONS, memory_budget=0.5)
    fake = source(make)
    with caplog.at_level(logging.WARNING, logger="offload_compiler"):
        model, batch = _model()
        got = train(model, batch, b, steps=BOTH_READ)
    first, second = b.plans
    assert second.replaces == first.graph_id and second.measured is not None
    assert second.reverted and not first.reverted
    assert f"given up, graph {first.graph_id} runs again" in second.summary()
    assert b.current_plans == [first] and b.settled
    (graph,) = b._measured
    assert graph.plan is first  # runs the first plan again, its predictions made again from its measurement
    assert graph.corrections.measured_call == first.measured.call and graph.corrections.fw_scale == pytest.approx(2.0)
    assert first.corrections == dataclasses.asdict(graph.corrections)
    assert first.predicted.step_ms == pytest.approx(first.measured.step_ms, rel=0.01)
    assert "predictions made again from its measurement (from the estimates: step" in first.summary()
    assert len(fake.asked) == 2 * len(MEASURED)  # each plan measured once (memory, timed calls), nothing after
    assert "going back to that plan" in caplog.text
    assert_bitwise(reference, got)


def test_a_new_plan_that_holds_less_memory_is_kept_even_if_slower():
    from offload_compiler.planning.judging import worse

    old = measure.Measured(call=3, fw_ms=10.0, bw_ms=10.0, stall_ms=0.0, step_peak_bytes=1000, held_before_bytes=0)
    slower = measure.Measured(call=3, fw_ms=10.0, bw_ms=12.0, stall_ms=0.0, step_peak_bytes=1000)
    assert worse(slower, old, Corrections())
    assert not worse(dataclasses.replace(slower, step_peak_bytes=999), old, Corrections())
    assert not worse(dataclasses.replace(slower, bw_ms=10.9), old, Corrections())  # 4.5%: within tolerance
    # the old plan went over memory_limit: whatever replaced it stays
    assert not worse(slower, old, Corrections(limit_bytes=900))


def test_gradients_are_bitwise_equal_across_a_replan(source):
    model, batch = _model()
    reference = train(model, batch, backend(**OPTIONS, policy="none", replan=False), steps=READ_AT + 1)
    b = backend(**OPTIONS, memory_budget=0.5)
    source(as_predicted(b.plans, time_scale=2.5, peak_extra=1 << 20))
    got = train(model, batch, b, steps=READ_AT + 1)
    assert len(b.plans) == 2  # the plan changed at step READ_AT (that call evaluates; same inputs)
    assert_bitwise(got, reference)


def test_auto_searches_once_on_the_measured_step_not_before(source, caplog):
    """A graph the backend measures: "auto" makes its first plan without probing
    realised partitions (their steps are priced on inputs the measurement is about to
    correct) and searches when it plans again from the measurement, which it then does
    even though the measurement agrees with the prediction. Once; gradients bitwise."""
    model, batch = _model()
    reference = train(model, batch, backend(**OPTIONS, policy="none", replan=False), steps=BOTH_READ)
    b = backend(**OPTIONS, memory_budget="auto")
    fake = source(as_predicted(b.plans))
    with caplog.at_level(logging.INFO, logger="offload_compiler"):
        got = train(model, batch, b, steps=BOTH_READ)
    first, second = b.plans
    assert first.provisional and "searched again" in first.summary()
    assert not second.provisional and second.replaces == first.graph_id
    assert second.corrections["measured_call"] == first.measured.call
    assert "\"auto\"'s first plan was not searched; the measurement agrees with it" in caplog.text
    first_log, replan_log = caplog.text.split("planning again from the measurement")
    assert "the solver's plan, not searched" in first_log and '"auto" probe 1/' not in first_log
    assert '"auto" probe 1/' in replan_log and "the solver's plan, not searched" not in replan_log
    assert [what for _, what in fake.asked] == [what for _, what in MEASURED] * 2  # the new plan measured once
    assert_bitwise(got, reference)


def test_auto_goes_back_when_its_new_plan_measures_past_max_overhead(source, caplog):
    """"auto"'s first plan measures as predicted; the searched re-plan then measures 4%
    slower than its prediction (not slower than the first plan by the tolerance that
    ``worse`` goes by), past ``max_overhead`` over the step with nothing moved as the
    first measurement explains it, while the first plan was within: the graph goes back
    to the first plan, says why, and gradients stay bitwise."""
    def make(call):
        return as_predicted(b.plans, time_scale=1.0 if len(b.plans) == 1 else 1.04)(call)

    model, batch = _model()
    reference = train(model, batch, backend(**OPTIONS, policy="none", replan=False), steps=BOTH_READ)
    b = backend(**OPTIONS, memory_budget="auto", plan_cache=False)
    fake = source(make)
    with caplog.at_level(logging.INFO, logger="offload_compiler"):
        model, batch = _model()
        got = train(model, batch, b, steps=BOTH_READ)
    first, second = b.plans
    assert second.replaces == first.graph_id and second.reverted and not first.reverted
    baseline = second.predicted.baseline_step_ms
    assert first.measured.step_ms <= baseline * 1.03 < second.measured.step_ms
    assert "past max_overhead 3.0%" in second.note and f"given up, graph {first.graph_id} runs again" in second.note
    assert f"as graph {first.graph_id}'s measurement explains it" in caplog.text
    assert "going back to that plan" in caplog.text
    assert b.current_plans == [first] and b.settled and len(fake.asked) == 2 * len(MEASURED)
    # the plan in force predicted by the model its own measurement corrected
    assert first.predicted.step_ms == pytest.approx(first.measured.step_ms, rel=0.01)
    assert first.predicted.step_peak_bytes == first.measured.step_peak_bytes
    assert first.predicted.baseline_step_ms == second.predicted.baseline_step_ms
    assert_bitwise(reference, got)


def test_a_new_plan_within_max_overhead_as_measured_is_kept_and_its_overhead_logged(source, caplog):
    b = backend(**OPTIONS, memory_budget="auto", plan_cache=False)
    source(as_predicted(b.plans))
    with caplog.at_level(logging.INFO, logger="offload_compiler"):
        _run(b, steps=BOTH_READ)
    first, second = b.plans
    assert not second.reverted and b.current_plans == [second]
    measured = second.measured.step_ms / second.predicted.baseline_step_ms - 1
    assert measured <= 0.03
    way = "over" if measured >= 0 else "under"
    assert f'"auto" measured {abs(measured) * 100:.1f}% {way} the step with nothing moved' in caplog.text


def _graph_after_replan(before_ms, after_ms, *, baseline_ms=100.0, max_overhead=0.03, measured_call=3,
                        limit_bytes=None):
    """A ``MeasuredGraph`` whose re-plan (predicted baseline ``baseline_ms``) measured
    ``after_ms``; the plan it replaced measured ``before_ms``."""
    from offload_compiler.replanning import MeasuredGraph

    def plan(graph_id, step_ms):
        m = measure.Measured(call=3, fw_ms=step_ms / 2, bw_ms=step_ms / 2, stall_ms=0.0)
        return types.SimpleNamespace(graph_id=graph_id, measured=m, note="", reverted=False, offloaded=["x"],
                                     recomputed=[], moves_nothing=False,
                                     predicted=types.SimpleNamespace(baseline_step_ms=baseline_ms, step_ms=baseline_ms))

    new = plan(1, after_ms)
    graph = MeasuredGraph(lambda *a: None, new, torch.device("cpu"),
                          Corrections(measured_call=measured_call, limit_bytes=limit_bytes), None,
                          max_overhead=max_overhead)
    return graph, new.measured, plan(0, before_ms)


@pytest.mark.parametrize("before_ms, after_ms, kw, gives_way", [
    (102.0, 104.0, {}, True),  # 4% against 3%, the replaced plan faster: back to it
    (102.0, 102.9, {}, False),  # within
    (105.0, 104.0, {}, False),  # both past it: the faster stays
    (102.0, 104.0, {"max_overhead": 0.05}, False),
    (102.0, 104.0, {"measured_call": None}, False),  # corrections not from a measurement: no baseline
    (102.0, 104.0, {"limit_bytes": 1 << 30}, False),  # memory_limit: the limit decides
    (102.0, 104.0, {"max_overhead": None}, False),  # a fixed budget
])
def test_auto_holds_its_overhead_as_measured(before_ms, after_ms, kw, gives_way, caplog):
    graph, timed, before = _graph_after_replan(before_ms, after_ms, **kw)
    with caplog.at_level(logging.INFO, logger="offload_compiler"):
        why = graph._over_overhead(timed, timed, before.measured, before)
    assert bool(why) == gives_way, why
    if gives_way:
        assert why == ("measured 104.00 ms, 4.0% over 100.00 ms with nothing moved, as graph 0's "
                       "measurement explains it, past max_overhead 3.0%; graph 0 measured 102.00 ms (2.0%)")
    if (before_ms, after_ms) == (105.0, 104.0):
        assert "keeping the faster" in caplog.text


def test_auto_past_max_overhead_where_the_replaced_plan_was_slower_plans_once_more(caplog):
    """The re-plan measured 4% over the step with nothing moved (predicted 0%), the plan
    it replaced 5%: it stays, and one more plan is asked for, searched within
    ``max_overhead`` less the 4% missed. A plan made so is not tightened again."""
    graph, timed, before = _graph_after_replan(105.0, 104.0)
    graph.recompile = lambda corrections, args, veto=None: None
    with caplog.at_level(logging.INFO, logger="offload_compiler"):
        assert graph._over_overhead(timed, timed, before.measured, before) is None
    assert graph.again.overhead_margin == pytest.approx(0.04) and graph.again.measured_call == 3
    assert "keeping the faster, and planning once more within 3.0% less what it missed by" in caplog.text
    graph.again, graph.corrections = None, graph.again
    assert graph._over_overhead(timed, timed, before.measured, before) is None and graph.again is None


def test_the_margin_is_what_the_replan_missed_its_predicted_overhead_by():
    predicted = types.SimpleNamespace(baseline_step_ms=100.0, step_ms=102.0)  # 2% predicted
    fitted = Corrections(measured_call=3, fw_scale=1.3)
    got = tightened(fitted, 0.05, predicted)
    assert got.overhead_margin == pytest.approx(0.03) and got.fw_scale == 1.3  # the fit stays
    assert tightened(got, 0.05, predicted).overhead_margin == pytest.approx(0.06)  # added to the one before
    assert tightened(fitted, 0.02, predicted) is None  # not under the measurement
    config = OffloadConfig(memory_budget="auto", max_overhead=0.03)
    assert within_margin(config, fitted) is config
    assert within_margin(config, got).max_overhead == pytest.approx(0.0)  # not below 0
    assert within_margin(config, Corrections(overhead_margin=0.01)).max_overhead == pytest.approx(0.02)
    assert "within max_overhead less 3.0%" in got.describe() and "max_overhead less" not in fitted.describe()
    assert got.key() != fitted.key()  # a plan of its own in the plan cache and Inductor's


def test_auto_planned_once_more_within_the_margin_measures_and_settles(source, caplog, monkeypatch):
    """The whole flow, the re-plan's measured overhead injected (a tiny model on a CPU
    cannot miss it): the re-plan past ``max_overhead`` with the first plan slower, a third
    plan searched within the margin replaces it, is measured, and is kept; three plans,
    each measured once, gradients bitwise."""
    import offload_compiler.verdicts as verdicts

    overheads = iter([(0.05, 0.08, False), (0.02, 0.05, False)])  # the re-plan's, then the third's
    monkeypatch.setattr(verdicts, "held_overhead", lambda *a: next(overheads))
    model, batch = _model()
    reference = train(model, batch, backend(**OPTIONS, policy="none", replan=False), steps=3 * READ_AT)
    b = backend(**OPTIONS, memory_budget="auto", plan_cache=False)
    fake = source(as_predicted(b.plans))
    with caplog.at_level(logging.INFO, logger="offload_compiler"):
        model, batch = _model()
        got = train(model, batch, b, steps=3 * READ_AT)
    first, second, third = b.plans
    assert third.replaces == second.graph_id and not second.reverted and not third.reverted
    predicted = second.predicted.step_ms / second.predicted.baseline_step_ms - 1
    assert third.corrections["overhead_margin"] == pytest.approx(0.05 - predicted)
    assert third.corrections["measured_call"] == second.corrections["measured_call"]
    assert '"auto" measured past max_overhead 3.0%' in caplog.text
    assert b.current_plans == [third] and b.settled and len(fake.asked) == 3 * len(MEASURED)
    assert_bitwise(reference, got)


def test_a_replan_is_judged_at_the_host_pace_of_the_plan_it_replaced():
    """``at_host_pace``: a phase the host paced in the new plan's measurement, at a slower
    pace per kernel than in the replaced plan's, loses the difference over its kernels
    (its transfer ops' host time stays), down to its kernels and stalls as timed with
    the host ahead; anything else stays as measured."""
    from offload_compiler.planning.judging import at_host_pace

    # The replaced plan: 100 and 200 kernels issued at 30 us each (1 ms of transfer ops too).
    old = measure.Measured(call=3, fw_ms=4.2, bw_ms=9.0, stall_ms=0.0, host_fw_ms=4.0, host_bw_ms=6.0,
                           host_transfer_ms=(1.0, 0.0), transfer_ops=(10, 0))
    # The new one: its forward paced, its kernels issued at 49 us ((5.9 - 1) ms over 100).
    new = measure.Measured(call=3, fw_ms=6.0, bw_ms=8.0, stall_ms=0.5, fw_stall_ms=0.2, host_fw_ms=5.9,
                           host_bw_ms=4.0, host_transfer_ms=(1.0, 0.0), transfer_ops=(10, 0),
                           ahead_compute_ms=(3.5, 7.0))
    judged = at_host_pace(new, (100, 220), old, (100, 200))
    assert judged.fw_ms == pytest.approx(6.0 - 0.019 * 100) and judged.bw_ms == 8.0  # backward not paced
    assert judged.stall_ms == new.stall_ms and new.fw_ms == 6.0
    floor = at_host_pace(dataclasses.replace(new, ahead_compute_ms=(4.5, None)), (100, 220), old, (100, 200))
    assert floor.fw_ms == pytest.approx(4.5 + 0.2)  # its kernels and stalls with the host ahead
    for same in (dataclasses.replace(new, ahead_compute_ms=(None, None)),  # kernels not timed
                 dataclasses.replace(new, host_fw_ms=3.5),  # the host faster than before
                 dataclasses.replace(new, host_fw_ms=5.0)):  # not paced (5.0 of 6.0)
        assert at_host_pace(same, (100, 220), old, (100, 200)) is same


def test_plans_are_compared_with_each_phase_at_least_at_its_hosts_time():
    """``at_least_host``: a phase whose span (the GPU reaching its start to its end) is
    shorter than the host's time to issue it, the GPU having started it behind, counts
    the host's time; a phase the host was ahead in, or a measurement without the host,
    stays as measured."""
    from offload_compiler.planning.judging import at_least_host

    backlog = measure.Measured(call=3, fw_ms=10.76, bw_ms=23.0, stall_ms=0.0, host_fw_ms=15.49, host_bw_ms=16.0)
    floored = at_least_host(backlog)
    assert (floored.fw_ms, floored.bw_ms) == (15.49, 23.0) and floored.step_ms == pytest.approx(38.49)
    for same in (dataclasses.replace(backlog, host_fw_ms=9.0), measure.Measured(call=3, fw_ms=1.0, bw_ms=2.0,
                                                                                stall_ms=0.0)):
        assert at_least_host(same) is same


def test_a_first_plan_timed_short_by_a_backlog_does_not_win_back_its_graph(source, caplog):
    """The first plan's forward ran 0.6x as long on the GPU as the host took to issue it
    (the GPU started it behind); the re-plan's forward, the host ahead of a GPU that
    starts idle, ran as the host issued it. By their spans the re-plan is 20% slower and
    would be given up; each phase counted at least at its host's time, it is not."""
    b = backend(**OPTIONS, memory_budget=0.5, plan_cache=False)
    paced = _host_paced(b.plans, op_ms=0.001, kernels=1.0)

    def make(call):
        m = paced(call)
        if len(b.plans) == 1:  # the span shorter than the host's issue
            return dataclasses.replace(m, fw_ms=0.6 * m.fw_ms)
        return m

    source(make)
    with caplog.at_level(logging.INFO, logger="offload_compiler"):
        _run(b, steps=2 * KERNELS_READ_AT - 1)
    first, second = b.plans
    assert second.measured.step_ms > 1.05 * first.measured.step_ms  # by the spans: worse
    assert not second.reverted and b.current_plans == [second]
    assert f"graph {first.graph_id}: {first.measured.host_fw_ms + first.measured.bw_ms:.2f} ms" in caplog.text


def test_a_replan_the_host_issued_at_a_slower_pace_is_not_given_up_for_it(source, caplog):
    """"auto"'s re-plan measures 30% over the step with nothing moved because the host
    issued its kernels 1.3x as slowly as in the first plan's timed calls, its kernels
    timed with the host ahead as predicted: judged at the first plan's pace it is within
    ``max_overhead`` and kept. Where its kernels, too, ran 1.3x, it is given up."""
    for kernels, gives_way in ((1.0, False), (1.3, True)):
        b = backend(**OPTIONS, memory_budget="auto", plan_cache=False)
        first_plan = _host_paced(b.plans, op_ms=0.001, kernels=1.0)

        def make(call, kernels=kernels):
            m = first_plan(call)
            if len(b.plans) == 1:
                return m
            p = b.plans[-1].predicted
            ahead = (p.fw_compute_ms * kernels, p.bw_compute_ms * kernels) if call == KERNELS_AT else (None, None)
            ops = m.host_transfer_ms
            fw, bw = 1.3 * (m.fw_ms - ops[0]) + ops[0], 1.3 * (m.bw_ms - ops[1]) + ops[1]
            return dataclasses.replace(m, fw_ms=fw, bw_ms=bw, host_fw_ms=fw, host_bw_ms=bw, ahead_compute_ms=ahead)

        source(make)
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="offload_compiler"):
            _run(b, steps=2 * KERNELS_READ_AT - 1)
        first, second = b.plans
        assert second.measured is not None and second.measured.step_ms > 1.25 * second.predicted.baseline_step_ms
        assert f"at graph {first.graph_id}'s host pace" in caplog.text
        assert second.reverted == gives_way and b.current_plans == [first if gives_way else second]


def test_held_overhead_is_decided_on_the_measurements_alone():
    """``planning.judging.held_overhead``, without a graph: both plans' overheads over the
    fitted step with nothing moved, and whether the re-plan gives way."""
    class P:
        baseline_step_ms = 100.0

    fitted = Corrections(measured_call=3)
    assert held_overhead(104.0, 102.0, P, fitted, 0.03) == (pytest.approx(0.04), pytest.approx(0.02), True)
    assert held_overhead(104.0, 105.0, P, fitted, 0.03)[2] is False  # the replaced plan was slower
    assert held_overhead(102.9, 102.0, P, fitted, 0.03)[2] is False  # within
    assert held_overhead(104.0, 102.0, P, fitted, None) is None  # a fixed budget
    assert held_overhead(104.0, 102.0, P, Corrections(), 0.03) is None  # nothing fitted
    assert held_overhead(104.0, 102.0, P, Corrections(measured_call=3, limit_bytes=1 << 30), 0.03) is None


def test_auto_searches_at_once_where_nothing_will_be_measured(caplog):
    """No measuring source for the graph's device (the CUDA one on a CPU graph), or
    ``replan=False``: the first plan is searched, as the only one."""
    for options in ({}, {"replan": False}):
        caplog.clear()
        b = backend(**OPTIONS, memory_budget="auto", plan_cache=False, **options)
        with caplog.at_level(logging.INFO, logger="offload_compiler"):
            _run(b, steps=4)
        (plan,) = b.plans
        assert not plan.provisional and '"auto" probe 1/' in caplog.text


def test_an_unsearched_plan_whose_measurement_is_not_trusted_is_searched_on_the_estimates(source, caplog):
    b = backend(**OPTIONS, memory_budget="auto")
    source(as_predicted(b.plans, time_scale=10.0))
    with caplog.at_level(logging.INFO, logger="offload_compiler"):
        _run(b, steps=8)
    first, second = b.plans[:2]
    assert first.provisional and not second.provisional and second.corrections == {}
    assert "planning again from the estimates" in caplog.text


def test_replan_false_measures_nothing(source):
    b = backend(**OPTIONS, memory_budget=0.5, replan=False)
    fake = source(as_predicted(b.plans, time_scale=3.0))
    _run(b, steps=5)
    assert fake.asked == [] and len(b.plans) == 1 and b.plans[0].measured is None


def test_no_measurement_without_backward(source):
    b = backend(**OPTIONS, memory_budget=0.5)
    fake = source(as_predicted(b.plans, time_scale=3.0))
    model, (x, y) = _model()
    compiled = torch.compile(model, backend=b)
    compiled(x, y).backward()
    with torch.no_grad():
        for _ in range(3):
            compiled(x, y)
    assert fake.asked == []  # calls under no_grad are not measured (nor counted)


@pytest.mark.parametrize("value", [40 << 30, "40", "auto", "0GiB", True, "lots"])
def test_memory_limit_is_validated(value):
    with pytest.raises(ValueError, match="memory_limit=.*not valid.*unit.*device"):
        OffloadConfig(memory_limit=value)


def test_memory_limit_parses_units():
    assert OffloadConfig(memory_limit="40GiB").memory_limit == 40 << 30
    assert OffloadConfig(memory_limit="1.5 GB").memory_limit == 1_500_000_000
    assert OffloadConfig(memory_limit="device").memory_limit == "device"


def test_memory_limit_device_needs_a_gpu():
    model, batch = _model()
    with pytest.raises(Exception, match="needs a CUDA device"):
        train(model, batch, backend(**OPTIONS, memory_limit="device"), steps=1)


def test_a_limit_no_plan_meets_names_the_shortfall():
    model, batch = _model()
    with pytest.raises(Exception, match=r"memory_limit cannot be met.*[0-9] (B|KiB|MiB|GiB) short") as info:
        train(model, batch, backend(**OPTIONS, memory_limit="64KiB"), steps=1)
    chain = [info.value, *(getattr(info.value, a) for a in ("__cause__", "inner_exception") if getattr(info.value, a, None))]
    error = next(e for e in chain if isinstance(e, MemoryLimitError))
    # It says what holds that least peak, in the user's terms (op, module, phase, source line).
    heading, activations, *held = str(error).split("short. Raise")[1].split("\n")[1:]
    assert heading == "  at that plan's predicted step peak:"
    assert activations.startswith("    ") and activations.endswith("activations saved for backward (kept, reloaded or recomputed)")
    assert held and all(re.match(r"    [0-9.]+ (B|KiB|MiB) \S+ \(.*(forward|backward).*\.py:\d+ in ", x) for x in held)


def test_disagreements_and_corrections_are_relative_to_the_prediction():
    class P:
        step_ms, step_peak_bytes, fw_compute_ms, bw_compute_ms = 10.0, 1000 << 20, 4.0, 6.0

    m = measure.Measured(call=3, fw_ms=4.1, bw_ms=6.2, stall_ms=0.1, fw_stall_ms=0.0,
                         held_before_bytes=5 << 30, step_peak_bytes=1020 << 20)
    assert disagreements(P, m, Corrections()) == []  # within 5%
    m.step_peak_bytes = 1200 << 20
    assert any("step peak" in w for w in disagreements(P, m, Corrections()))
    limit = Corrections(limit_bytes=6 << 30)
    assert any("over memory_limit" in w for w in disagreements(P, m, limit))
    c = corrected(limit, P, m)
    assert c.unmodelled_bytes == 200 << 20 and c.held_before_bytes == 5 << 30
    assert c.fw_scale == pytest.approx(4.1 / 4.0) and c.bw_scale == pytest.approx(6.1 / 6.0)
    assert c.key() != limit.key()



def test_the_hosts_time_corrects_the_host_lane_and_a_paced_phase_keeps_its_scale():
    class P:
        step_ms, step_peak_bytes, fw_compute_ms, bw_compute_ms, kernels = 10.0, 1 << 30, 4.0, 6.0, (100, 200)

    # The forward: 5 ms on the GPU, issued in 4.8 (paced by the host: its GPU time says
    # nothing of its kernels), 2 ms of it in 20 transfer ops; the backward: issued in 3 ms
    # of its 6.6, 1 ms in 20 ops.
    m = measure.Measured(call=3, fw_ms=5.0, bw_ms=6.6, stall_ms=0.0, host_fw_ms=4.8, host_bw_ms=3.0,
                         host_transfer_ms=(2.0, 1.0), transfer_ops=(20, 20))
    fitted_before = Corrections(fw_scale=1.5, measured_call=2)
    c = corrected(fitted_before, P, m)
    assert c.host_us == (28.0, 10.0)  # (4.8 - 2) ms over 100 kernels; (3 - 1) over 200
    assert c.op_host_us == (100.0, 50.0)
    assert c.fw_scale == 1.5  # paced, fitted before: kept
    assert c.bw_scale == pytest.approx(1.1)
    assert "host_us" in c.key() and c.key() != fitted_before.key()
    assert c.queued_ms is None  # not measured
    queued = corrected(c, P, dataclasses.replace(m, queued_ms=(3.456, 0.2)))
    assert queued.queued_ms == (3.46, 0.2)
    assert "GPU work queued when the forward starts 3.46 ms and the backward 0.20 ms" in queued.describe()
    assert corrected(queued, P, m).queued_ms == (3.46, 0.2)  # a measurement without it keeps it


def test_at_the_first_fit_a_paced_phase_goes_halfway_to_the_other_phases_scale_within_its_own_time():
    """The host paced the forward: its time bounds its kernels' (they ran within it) but
    does not measure them. The first fit takes it halfway (geometrically) from 1 to the
    backward's scale, unless its own measured compute over its estimate is less; a paced
    backward goes halfway to the forward's."""
    class P:
        step_ms, step_peak_bytes, fw_compute_ms, bw_compute_ms, kernels = 10.0, 1 << 30, 4.0, 6.0, (100, 200)

    def measured(fw_ms, bw_ms, host_fw_ms, host_bw_ms):
        return measure.Measured(call=3, fw_ms=fw_ms, bw_ms=bw_ms, stall_ms=0.0, host_fw_ms=host_fw_ms,
                                host_bw_ms=host_bw_ms, host_transfer_ms=(0.0, 0.0), transfer_ops=(0, 0))

    c = corrected(Corrections(), P, measured(5.0, 7.2, 4.8, 3.0))  # backward 1.2x its estimate
    assert c.bw_scale == pytest.approx(1.2) and c.fw_scale == pytest.approx(1.2 ** 0.5)
    c = corrected(Corrections(), P, measured(4.2, 7.2, 4.0, 3.0))  # its own time allows 1.05x
    assert c.bw_scale == pytest.approx(1.2) and c.fw_scale == pytest.approx(1.05)
    c = corrected(Corrections(), P, measured(3.6, 6.0, 1.0, 5.9))  # the backward paced
    assert c.fw_scale == pytest.approx(0.9) and c.bw_scale == pytest.approx(0.9 ** 0.5)
    c = corrected(Corrections(fw_scale=2.0), P, measured(5.0, 7.2, 4.8, 3.0))  # from where it was
    assert c.fw_scale == pytest.approx((2.0 * 1.2) ** 0.5)
    both = corrected(Corrections(), P, measured(5.0, 7.2, 4.8, 7.0))  # both paced: nothing to go by
    assert both.fw_scale == 1.0 and both.bw_scale == 1.0
    unmeasured = corrected(Corrections(), P, measure.Measured(call=3, fw_ms=5.0, bw_ms=6.6, stall_ms=0.0))
    assert unmeasured.host_us == (0.0, 0.0) and unmeasured.fw_scale == pytest.approx(1.25)


def test_compute_scales_are_fitted_so_time_waiting_for_the_host_counts_once():
    """A GPU whose kernels run 1.5x (forward) and 1.3x (backward) the estimate, issued
    by a host about as slow as the average kernel: the measured phases include the
    GPU's waits for the host. Fitted by simulating the measured plan again with the
    measured host, the scales come out as the kernels' own, and the plan's simulation
    with them takes the measured time per phase; taken as measured compute over
    predicted (no simulation), they also hold the waits, which the host lane then
    counts again."""
    b = backend(**OPTIONS, memory_budget=0.5, replan=False)
    _run(b, steps=1)
    (plan,) = b.plans
    p = plan.predicted
    assert plan.offloaded and plan.resimulate is not None
    host_us = tuple(round(0.9 * ms / n * 1e3, 1) for ms, n in zip((p.fw_compute_ms, p.bw_compute_ms), p.kernels))
    op_host_us = (2.0, 2.0)
    truth = plan.resimulate(1.5, 1.3, host_us=host_us, op_host_us=op_host_us)
    unpaced = plan.resimulate(1.5, 1.3)
    assert truth.fw_ms > unpaced.fw_ms * 1.02  # the host held the GPU back
    ops = 2 * len(plan.offloaded)
    m = measure.Measured(
        call=3, fw_ms=truth.fw_ms, bw_ms=truth.bw_ms, stall_ms=truth.stall_ms, fw_stall_ms=0.0,
        host_fw_ms=host_us[0] * p.kernels[0] / 1e3 + ops * op_host_us[0] / 1e3,
        host_bw_ms=host_us[1] * p.kernels[1] / 1e3 + ops * op_host_us[1] / 1e3,
        host_transfer_ms=(ops * op_host_us[0] / 1e3, ops * op_host_us[1] / 1e3), transfer_ops=(ops, ops))
    fitted = corrected(Corrections(), p, m, plan.resimulate)
    assert fitted.host_us == pytest.approx(host_us, rel=1e-3)
    assert fitted.fw_scale == pytest.approx(1.5, rel=0.01)
    assert fitted.bw_scale == pytest.approx(1.3, rel=0.01)
    again = plan.resimulate(fitted.fw_scale, fitted.bw_scale, host_us=fitted.host_us, op_host_us=fitted.op_host_us)
    assert again.fw_ms == pytest.approx(m.fw_ms, rel=0.005) and again.bw_ms == pytest.approx(m.bw_ms, rel=0.005)
    paced_fw = dataclasses.replace(m, host_fw_ms=m.fw_ms)  # the host set the forward's pace
    fitted_before = Corrections(fw_scale=1.2, measured_call=2)
    assert corrected(fitted_before, p, paced_fw, plan.resimulate).fw_scale == 1.2  # kept
    first = corrected(Corrections(), p, paced_fw, plan.resimulate)  # the first fit: the backward's
    assert first.fw_scale == pytest.approx(min(first.bw_scale ** 0.5, paced_fw.fw_ms / p.fw_compute_ms), rel=0.01)
    ratio = corrected(Corrections(), p, m)  # no simulation: the waits in the scales too
    assert ratio.fw_scale > 1.5 * 1.02
    double = plan.resimulate(ratio.fw_scale, ratio.bw_scale, host_us=ratio.host_us, op_host_us=ratio.op_host_us)
    assert double.step_ms > m.step_ms * 1.02
    # The loop left GPU work queued when the forward started: the host's head start hides
    # part of its pace. Fitted with the measured head start, the scales are the kernels'
    # own again; fitted without it, the forward's would absorb the difference.
    head = 0.5 * (truth.fw_ms - unpaced.fw_ms)
    ahead = plan.resimulate(1.5, 1.3, host_us=host_us, op_host_us=op_host_us, host_lead_ms=(head, 0.0))
    assert unpaced.fw_ms < ahead.fw_ms < truth.fw_ms
    queued = dataclasses.replace(m, fw_ms=ahead.fw_ms, bw_ms=ahead.bw_ms, stall_ms=ahead.stall_ms,
                                 queued_ms=(head, 0.0))
    with_head = corrected(Corrections(), p, queued, plan.resimulate)
    assert with_head.queued_ms == (round(head, 2), 0.0)
    assert with_head.fw_scale == pytest.approx(1.5, rel=0.01) and with_head.bw_scale == pytest.approx(1.3, rel=0.01)
    without = corrected(Corrections(), p, dataclasses.replace(queued, queued_ms=(None, None)), plan.resimulate)
    assert without.fw_scale < 1.5 * 0.99


def _host_paced(plans, op_ms, kernels=None):
    """A measurement of the latest plan on a GPU the host keeps waiting: each phase
    issued in as long as it ran, every transfer op ``op_ms`` of host time. ``kernels``:
    the call timed with the host ahead (``KERNELS_AT``, the first plan's) measures each
    phase's compute at that many times its estimate."""
    def make(call):
        plan = plans[-1]
        p, ops = plan.predicted, 2 * len(plan.offloaded)
        fw, bw = p.fw_compute_ms + ops * op_ms, p.bw_compute_ms + ops * op_ms
        ahead = (p.fw_compute_ms * kernels, p.bw_compute_ms * kernels) if kernels and call == KERNELS_AT else (None, None)
        return measure.Measured(call=call, fw_ms=fw, bw_ms=bw, stall_ms=0.0, host_fw_ms=fw, host_bw_ms=bw,
                                host_transfer_ms=(ops * op_ms, ops * op_ms), transfer_ops=(ops, ops), held_before_bytes=0,
                                step_peak_bytes=p.step_peak_bytes, peak_phase="backward", ahead_compute_ms=ahead,
                                queued_ms=(0.25, 0.0), allocations=(120, 80))
    return make


def test_a_paced_phase_is_timed_again_with_the_host_ahead_and_its_kernels_give_its_scale(source):
    """Both phases paced by the host: their time says nothing of the kernels. One more
    call is timed, the GPU held before each phase for longer than the host took to issue
    it; the compute measured there (1.3x the estimate) is each phase's new scale, where
    without it both would stay at 1."""
    b = backend(**OPTIONS, memory_budget=0.5)
    fake = source(_host_paced(b.plans, op_ms=0.01, kernels=1.3))
    _run(b, steps=KERNELS_READ_AT)
    assert fake.asked == MEASURED + [(KERNELS_AT, "kernels")]
    first, second = b.plans
    p = first.predicted
    fw, bw = (p.fw_compute_ms + 0.02 * len(first.offloaded), p.bw_compute_ms + 0.02 * len(first.offloaded))
    assert fake.holds[KERNELS_AT] == pytest.approx((2.5 * fw + 2.0, 2.5 * bw + 2.0))
    assert first.measured.ahead_compute_ms == pytest.approx((1.3 * p.fw_compute_ms, 1.3 * p.bw_compute_ms))
    assert "with the host ahead: forward compute" in first.measured_text()
    assert "transfer ops; 120 and 80 device allocations)" in first.measured_text()
    assert "GPU work queued when the forward started 0.25 ms, when the backward started 0.00 ms" in first.measured_text()
    assert second.corrections["fw_scale"] == pytest.approx(1.3) and second.corrections["bw_scale"] == pytest.approx(1.3)


def test_the_measurement_says_which_phase_the_host_issued_slower_than_its_kernels_ran(source):
    """Kernels that run in 0.8x their estimate, issued at the estimate's pace: the log
    says, per phase, by how much the host's issue time exceeded its kernels'."""
    b = backend(**OPTIONS, memory_budget=0.5)
    source(_host_paced(b.plans, op_ms=0.01, kernels=0.8))
    _run(b, steps=KERNELS_READ_AT)
    m = b.plans[0].measured
    by = [host - ms for host, ms in zip((m.host_fw_ms, m.host_bw_ms), m.ahead_compute_ms)]
    assert all(x > 0 for x in by)
    assert (f"the host took longer to issue than the kernels ran: the forward {by[0]:.2f} ms and the "
            f"backward {by[1]:.2f} ms") in b.plans[0].measured_text()


def test_an_unpaced_measurement_asks_for_no_call_with_the_host_ahead(source):
    b = backend(**OPTIONS, memory_budget=0.5)
    fake = source(as_predicted(b.plans, time_scale=1.3))
    _run(b, steps=KERNELS_READ_AT)
    assert ("kernels" not in {what for _, what in fake.asked}) and b.plans[0].measured.ahead_compute_ms == (None, None)
    assert "longer to issue" not in b.plans[0].measured_text()  # no kernels timed apart: nothing to say


def test_a_paced_phases_kernels_timed_with_the_host_ahead_set_its_scale_at_any_fit():
    class P:
        step_ms, step_peak_bytes, fw_compute_ms, bw_compute_ms, kernels = 10.0, 1 << 30, 4.0, 6.0, (100, 200)

    paced_fw = measure.Measured(call=3, fw_ms=5.0, bw_ms=7.2, stall_ms=0.0, host_fw_ms=4.8, host_bw_ms=3.0,
                                host_transfer_ms=(0.0, 0.0), transfer_ops=(0, 0), ahead_compute_ms=(4.4, None))
    for before in (Corrections(), Corrections(fw_scale=1.5, measured_call=2)):
        c = corrected(before, P, paced_fw)
        assert c.fw_scale == pytest.approx(before.fw_scale * 1.1)  # not halfway, not kept
        assert c.bw_scale == pytest.approx(1.2)
    # Measured for the phase that was not paced too: the GPU's own time, not the timed call's.
    c = corrected(Corrections(), P, dataclasses.replace(paced_fw, ahead_compute_ms=(4.4, 6.6)))
    assert c.fw_scale == pytest.approx(1.1) and c.bw_scale == pytest.approx(1.1)
    # The host did not get ahead (None): the first fit goes halfway, as before.
    c = corrected(Corrections(), P, dataclasses.replace(paced_fw, ahead_compute_ms=(None, None)))
    assert c.fw_scale == pytest.approx(1.2 ** 0.5)


def test_a_held_call_sleeps_the_gpu_before_each_held_phase_and_checks_the_host_got_ahead(monkeypatch):
    """The ``"kernels"`` recorder spins the GPU for its hold before the phase's start
    event, and a phase counts as measured with the host ahead only where that event had
    not been reached when the host had issued the phase (here: the forward yes, the
    backward no)."""
    _FakeAllocator().install(monkeypatch)
    log = []
    reached = {"fw_start": False, "bw_start": True}

    class Event:
        def __init__(self, enable_timing=False):
            self.name = None

        def record(self, stream=None):
            self.name = next((p for p in ("fw_start", "fw_end", "bw_start", "bw_end") if p not in recorded), None)
            recorded.append(self.name)
            log.append(("record", self.name))

        def query(self):
            return reached[self.name]

        def synchronize(self):
            pass

        def elapsed_time(self, other):
            return 2.0

    recorded = []
    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "stream", lambda stream: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: log.append(("sleep", cycles)))
    monkeypatch.setattr(measure, "_cycles_per_ms", lambda device: 1000.0)
    rec = measure.CudaRecorder(torch.device("cuda", 0), 9, "kernels", hold_ms=(5.0, 3.0))
    for phase in measure.PHASES:
        rec.probe(phase)
    assert log == [("sleep", 5000), ("record", "fw_start"), ("record", "fw_end"),
                   ("sleep", 3000), ("record", "bw_start"), ("record", "bw_end")]
    m = rec.result()
    assert rec.ahead == [True, False] and m.ahead_compute_ms == (2.0, None)
    assert measure.CudaRecorder(torch.device("cuda", 0), 3, "time").hold_cycles == (0, 0)


def test_transfer_ops_that_a_paced_host_cannot_afford_are_planned_away(source):
    """The same graph, planned again from a measurement where the host, not the GPU, set
    the pace and the transfer ops took half the forward's compute: "auto" keeps its
    overhead by moving a quarter or fewer of the values it moved before."""
    b = backend(**OPTIONS)
    first_plan = backend(**OPTIONS, replan=False)
    _run(first_plan, steps=1)
    offloaded = len(first_plan.plans[0].offloaded)
    assert offloaded  # the tiny GPT offloads at "auto" where the host is not measured
    fake = source(_host_paced(b.plans, op_ms=0.5 * first_plan.plans[0].predicted.fw_compute_ms / (2 * offloaded)))
    _run(b, steps=KERNELS_READ_AT)  # paced: a call timed with the host ahead, a step after the read
    assert fake.asked == MEASURED + [(KERNELS_AT, "kernels")]
    first, second = b.plans
    assert len(first.offloaded) == offloaded
    assert f"in {4 * offloaded} transfer ops" in first.measured_text()
    assert second.corrections["op_host_us"][0] > 0 and second.corrections["host_us"][0] > 0
    assert len(second.offloaded) <= offloaded // 4
    assert second.predicted.step_ms <= second.predicted.baseline_step_ms * 1.03

def test_auto_decides_on_its_overhead_with_the_measured_host_and_without_it(source, monkeypatch):
    """The host's measured pace can make it the bottleneck, where the GPU work a plan
    adds looks free. Planned again from a measurement with a host lane, "auto" decides
    on lanes that also hold its overhead without the host (``Lanes.without_host_scale``: the
    step with nothing moved, with the host, over the same without it); the first plan
    (no host measured) and a fixed budget's re-plan decide on the lanes as measured,
    and the predictions are made with the host either way."""
    from offload_compiler.planning import search

    seen = []
    real = search._solve

    def spy(facts, config, lanes, *args, **kwargs):
        seen.append((config.memory_budget, lanes))
        return real(facts, config, lanes, *args, **kwargs)

    monkeypatch.setattr(search, "_solve", spy)
    for budget in ("auto", 0.5):
        b = backend(**OPTIONS, memory_budget=budget)
        source(_host_paced(b.plans, op_ms=0.001, kernels=1.0))
        seen.clear()
        _run(b, steps=KERNELS_READ_AT)
        first, second = b.plans
        host = tuple(second.corrections["host_us"])
        assert host[0] > 0
        weights = {lanes.without_host_scale for _, lanes in seen if lanes.host_us == host}
        assert {lanes.without_host_scale for _, lanes in seen if lanes.host_us == (0.0, 0.0)} == {0.0}  # the first plan
        if budget == "auto":
            (w,) = weights
            assert w > 1.0  # the host lengthens the step with nothing moved
        else:
            assert weights == {0.0}
        again = second.resimulate(1.0, 1.0)  # the plan's own lanes: with the host, not held
        assert second.predicted.step_ms == pytest.approx(again.step_ms)


def test_the_measurement_is_written_to_the_dump_beside_the_prediction(source, tmp_path):
    import json

    b = backend(**OPTIONS, memory_budget=0.5, dump_dir=str(tmp_path))
    make = as_predicted(b.plans)

    def with_events(call):
        m = make(call)
        m.events = [{"lane": "compute", "name": "forward", "start_ms": 0.0, "dur_ms": m.fw_ms, "args": {}},
                    {"lane": "d2h", "name": "d2h 1.0 MiB", "start_ms": 0.1, "dur_ms": 0.2,
                     "args": {"nbytes": 1 << 20}}]
        return m

    source(with_events)
    _run(b, steps=READ_AT)
    (folder,) = tmp_path.glob("graph_*")
    record = json.loads((folder / "measured.json").read_text())
    assert record["measured"]["call"] in [c for c, what in MEASURED if what == "time"]
    assert record["predicted"]["step_ms"] > 0
    trace = json.loads((folder / "timeline.json").read_text())
    names = [e.get("args", {}).get("name") for e in trace["traceEvents"] if e.get("ph") == "M"]
    assert any(n and n.startswith("measured") for n in names), names
    assert any(e.get("name") == "d2h 1.0 MiB" for e in trace["traceEvents"])


def test_a_measurement_far_from_any_plan_is_not_acted_on(source, caplog):
    """A measured step 10x the prediction measured something else (other graphs' work
    inside this graph's span): warned about, the plan kept."""
    b = backend(**OPTIONS, memory_budget=0.5)
    source(as_predicted(b.plans, time_scale=10.0))
    with caplog.at_level(logging.WARNING, logger="offload_compiler"):
        _run(b, steps=READ_AT)
    assert len(b.plans) == 1 and b.plans[0].measured is not None
    assert "keeping the plan" in caplog.text


def test_a_graph_planned_for_all_is_measured_not_replanned(source, caplog):
    b = backend(**OPTIONS, policy="all")
    fake = source(as_predicted(b.plans, time_scale=2.0))
    with caplog.at_level(logging.INFO, logger="offload_compiler"):
        _run(b, steps=READ_AT)
    assert fake.asked == MEASURED and len(b.plans) == 1 and b.plans[0].measured is not None
    # Said as what happened (not planned again by design), not as a re-plan that missed.
    assert "measured only, not planned again" in caplog.text and "still differs" not in caplog.text


@pytest.mark.parametrize("disturbance", ["allocation", "release"])
def test_a_timed_call_during_which_host_memory_was_pinned_or_released_is_measured_again(source, disturbance):
    """Pinning host memory stops the host, and the GPU waits for it; giving pinned memory
    back (the pool trimming its idle blocks) waits for the whole device: a timed call
    during which the host pool allocated or released a block measures that, not the
    plan. It is measured again on the next two calls (memory, then time), and timed
    again a step after each timing is read."""
    b = backend(**OPTIONS, memory_budget=0.5)
    fake = source(as_predicted(b.plans))
    made, held = fake.recorder, []
    pool = host_pool()

    def allocate():  # blocks checked out until the pool allocates a new one
        before = pool.allocations
        while pool.allocations == before:  # idle blocks of the size go first
            held.append(pool.acquire(torch.empty(12345, dtype=torch.uint8), pinned=False))

    def idle_block():  # before the timed call: a block checked out and given back
        host, block = pool.acquire(torch.empty(23456, dtype=torch.uint8), pinned=False)
        del host, block
        pool.stats()  # looks at every block: that one is idle now

    def release():  # at the end of the call, idle blocks released past a lowered bound
        before, bound = pool.stats().released_blocks, pool.max_idle_bytes
        pool.max_idle_bytes = 0
        pool.max_idle_bytes = bound
        assert pool.stats().released_blocks > before

    def recorder(device, call, what, intervals=0, **held):
        got = made(device, call, what)
        if (call, what) == (3, "time"):
            probe = got.probe
            if disturbance == "release":
                idle_block()

            def disturbing(phase):
                probe(phase)
                if (phase, disturbance) in (("fw_start", "allocation"), ("bw_end", "release")):
                    (allocate if disturbance == "allocation" else release)()

            got.probe = disturbing
        return got

    fake.recorder = recorder
    _run(b, steps=READ_AT + 2)
    again = [(4, "memory")] + [(call + 2, what) for call, what in MEASURED[1:]]
    assert fake.asked == [(2, "memory"), (3, "time")] + again
    (plan,) = b.plans
    assert plan.measured is not None and plan.measured.call in [call for call, _ in again[1:]]


def test_a_step_still_over_the_memory_limit_after_a_replan_plans_again(source, caplog):
    """What the model misses changes with the plan: the first plan and the first re-plan
    (made with the first one's offset) each measure a fortieth of the unmodified peak
    over the limit; later plans miss what the re-plan missed. The limit is the user's
    bound, so the backend plans again (up to ``MAX_LIMIT_REPLANS``) until the measured
    step fits."""
    probe = backend(**OPTIONS, memory_budget=1.0, replan=False)
    _run(probe, steps=1)
    base = probe.plans[0].predicted.baseline_step_peak_bytes
    limit = int(base * 0.8)
    b = backend(**OPTIONS, memory_limit=f"{limit}B")
    extras = {}

    def make(call):
        n, plan = len(b.plans), b.plans[-1]
        modelled = plan.predicted.step_peak_bytes - (plan.corrections or {}).get("unmodelled_bytes", 0)
        if n not in extras:
            extras[n] = limit + base // 40 - modelled if n <= 2 else extras[2]
        return as_predicted(b.plans, peak_extra=extras[n])(call)

    source(make)
    with caplog.at_level(logging.INFO, logger="offload_compiler"):
        _run(b, steps=1 + (1 + MAX_LIMIT_REPLANS) * (READ_AT - 1))
    measured = [p.measured.step_peak_bytes for p in b.plans]
    assert measured[0] > limit and measured[1] > limit  # one re-plan was not enough
    assert measured[-1] <= limit and b.settled
    assert 3 <= len(b.plans) <= 1 + MAX_LIMIT_REPLANS
    assert [p.replaces for p in b.plans[1:]] == [p.graph_id for p in b.plans[:-1]]


def test_an_unmeasured_least_plan_just_over_the_limit_runs_and_is_measured(caplog):
    """Before any measurement the predicted peak is an estimate: a least peak predicted
    over the limit by less than the tolerance runs (with a warning), one further over
    is refused with the shortfall."""
    probe = backend(**OPTIONS, memory_budget="1B", replan=False)  # the least peak any plan reaches
    with caplog.at_level(logging.ERROR):
        _run(probe, steps=1)
    least = probe.plans[0].predicted.step_peak_bytes
    b = backend(**OPTIONS, memory_limit=f"{int(least * (1 - TOLERANCE / 2))}B")
    with caplog.at_level(logging.WARNING, logger="offload_compiler"):
        _run(b, steps=1)
    assert b.plans[0].predicted.step_peak_bytes == least
    assert "within the prediction's own error" in caplog.text
    with pytest.raises(Exception, match=r"memory_limit cannot be met.* short\. Raise"):
        _run(backend(**OPTIONS, memory_limit=f"{int(least * (1 - 2 * TOLERANCE))}B"), steps=1)


class _Plan:
    """What ``fit_limit`` reads of a realised plan."""

    def __init__(self, act, step_peak, step_ms):
        self.final = types.SimpleNamespace(peak_bytes=act, step_peak_bytes=step_peak, step_ms=step_ms,
                                           step_peak_holders=[])


def _u_shaped(least_act=100 << 20):
    """Plans of an activation budget whose step peak falls with the budget down to 400 MiB,
    then rises again (the backward regenerates what it recomputes, alive together), as
    measured on the H100 for the example GPT: the least activation peak is not the least
    step peak. Step time falls as the budget grows."""
    asked = []

    def attempt(budget):
        asked.append(budget)
        act = max(least_act, min(budget, 800 << 20))
        step_peak = act + 80 * 2**20 + max(0, (400 << 20) - act) * 2
        return _Plan(act, step_peak, 10.0 - act / 2**30)
    return attempt, asked


def test_a_limit_only_a_middle_budget_meets_is_found():
    """The plan with the least activation peak (about 780 MiB of step peak here) is over
    a limit of 600 MiB, which plans of middle budgets meet: the search finds the fastest
    of those instead of reporting a shortfall."""
    from offload_compiler.planning.limits import fit_limit

    attempt, asked = _u_shaped()
    best = fit_limit(None, attempt, 800 << 20, 600 << 20, Corrections(limit_bytes=600 << 20), 0)
    assert best.final.step_peak_bytes <= 600 << 20
    assert best.final.peak_bytes > 450 << 20  # close to the largest budget that fits (520 MiB)
    assert len(asked) <= 1 + 12 + 5


def test_a_limit_no_plan_tried_meets_reports_the_least_step_peak_of_them():
    from offload_compiler.planning.limits import fit_limit

    attempt, _ = _u_shaped()
    limit = 400 << 20  # every plan's step peak is at least 480 MiB
    with pytest.raises(MemoryLimitError, match=r"least step peak of the \d+ plans tried is 480.0 MiB .* "
                                               r"400.0 MiB is available.*80.0 MiB short"):
        fit_limit(None, attempt, 800 << 20, limit, Corrections(limit_bytes=limit, measured_call=3), 0)


def test_the_first_plan_under_a_limit_holds_back_room_for_the_first_steps(monkeypatch, caplog):
    """Before a measurement, ``memory_limit`` holds back ``FIRST_STEPS_FACTOR`` times what
    is held at compile time (the optimizer's state to come) where a plan fits so, else
    not (with a warning); a measurement replaces it with what was held, and one that
    needed much less than was held back plans again for the room."""
    from offload_compiler.planning import limits

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 100 << 20)
    first = limits.initial(OffloadConfig(memory_limit="1000MiB"), torch.device("cuda", 0))
    assert first.first_steps_bytes == limits.FIRST_STEPS_FACTOR * (100 << 20)
    assert first.available_bytes == (1000 - 100 - 200) << 20
    assert first.key() == dataclasses.replace(first, first_steps_bytes=0, held_before_bytes=300 << 20).key()
    attempt, _ = _u_shaped()  # step peaks from 480 MiB; within 700 MiB: held back, it fits
    assert attempt(800 << 20).final.step_peak_bytes > 700 << 20
    best = limits.fit_limit(None, attempt, 800 << 20, first.available_bytes, first, 0)
    assert best.final.step_peak_bytes <= 700 << 20
    tight = limits.initial(OffloadConfig(memory_limit="650MiB"), torch.device("cuda", 0))  # 350 MiB, held back
    with caplog.at_level(logging.WARNING, logger="offload_compiler.progress"):
        best = limits.fit_limit(None, attempt, 800 << 20, tight.available_bytes, tight, 0)
    assert 550 << 20 >= best.final.step_peak_bytes > 350 << 20
    assert "no plan leaves 200.0 MiB for what the first steps add" in caplog.text
    m = measure.Measured(call=5, fw_ms=1.0, bw_ms=1.0, stall_ms=0.0, held_before_bytes=130 << 20,
                         step_peak_bytes=690 << 20)  # the plan fitted under 700 MiB, with 200 held back
    p = types.SimpleNamespace(step_ms=2.0, step_peak_bytes=690 << 20, baseline_step_peak_bytes=900 << 20,
                              fw_compute_ms=1.0, bw_compute_ms=1.0, kernels=(0, 0))
    assert disagreements(p, m, first) == ["130.0 MiB held before the forward and the step peak leave 180.0 MiB of "
                                          "memory_limit unused (the plan held back 200.0 MiB for the first steps)"]
    unmoved = types.SimpleNamespace(**{**vars(p), "baseline_step_peak_bytes": 690 << 20})
    assert disagreements(unmoved, m, first) == []  # it moves nothing: no faster plan to make room for
    m.held_before_bytes = 290 << 20  # about all of it needed: 20 MiB left, within the tolerance
    assert disagreements(p, m, first) == []
    again = corrected(first, p, m)
    assert again.first_steps_bytes == 0 and again.held_before_bytes == 290 << 20
    assert (1000 - 290 - 4) << 20 <= again.available_bytes <= (1000 - 290) << 20  # rounded down (AVAILABLE_BITS)
    assert disagreements(p, m, again) == []


class _FakeAllocator:
    """What a ``CudaRecorder`` reads of the CUDA caching allocator, on a CPU: counts,
    bytes, the history records while recording is on (turning it off clears them), and
    the segments the test lays out (``segments``, read as the allocator's layout). An
    allocation counts ``block`` bytes (what the test says the allocator handed out) and
    records the bytes requested."""

    def __init__(self, segments=None):
        self.allocs = self.frees = self.current = 0
        self.recording, self.trace, self.live = False, [], {}
        self.segments = segments or []

    def alloc(self, nbytes, *, addr=None, block=None):
        self.allocs += 1
        block = nbytes if block is None else block
        self.current += block
        addr = 4096 * self.allocs if addr is None else addr
        self.live[addr] = block
        if self.recording:
            self.trace.append({"action": "alloc", "addr": addr, "size": nbytes, "frames": []})
        return addr

    def free(self, addr):
        self.frees += 1
        block = self.live.pop(addr)
        self.current -= block
        if self.recording:
            self.trace.append({"action": "free_requested", "addr": addr, "size": block, "frames": []})
            self.trace.append({"action": "free_completed", "addr": addr, "size": block, "frames": []})

    def install(self, monkeypatch):
        class Event:
            def __init__(self, enable_timing=False):
                pass

            def record(self, stream=None):
                pass

            def synchronize(self):
                pass

            def elapsed_time(self, other):
                return 1.0

        def history(enabled="all", **kwargs):
            self.recording = enabled is not None
            if not self.recording:
                self.trace = []

        monkeypatch.setattr(torch.cuda, "memory_stats", lambda device=None: {
            "allocation.all.allocated": self.allocs, "allocation.all.freed": self.frees,
            "allocated_bytes.all.current": self.current})
        monkeypatch.setattr(torch.cuda, "Event", Event)
        monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: None)
        monkeypatch.setattr(measure, "_idle_stream", lambda device: None)
        monkeypatch.setattr(torch.cuda.memory, "_record_memory_history", history)
        monkeypatch.setattr(torch.cuda.memory, "_snapshot",
                            lambda device=None, **kwargs: {"device_traces": [list(self.trace)],
                                                           "segments": self.segments})


def test_nested_memory_calls_of_two_graphs_each_read_their_whole_call(monkeypatch):
    """A graph break makes two graphs, A and B, measured in the same step: A's forward,
    B's forward, B's backward, A's backward. B's backward ending must not end the
    recording A still needs (its backward allocates after that), and B reads the records
    from its own start; recording stops when the last of them ends."""
    gpu = _FakeAllocator()
    gpu.install(monkeypatch)
    device = torch.device("cuda", 0)
    a, b = measure.CudaRecorder(device, 2, "memory"), measure.CudaRecorder(device, 2, "memory")
    a.probe("fw_start")
    a1 = gpu.alloc(100)
    a.probe("fw_end")
    b.probe("fw_start")
    gpu.alloc(50)
    b.probe("fw_end")
    b.probe("bw_start")
    gpu.free(gpu.alloc(30))
    b.probe("bw_end")
    assert gpu.recording  # A's backward is still to come
    a.probe("bw_start")
    gpu.free(gpu.alloc(200))
    gpu.free(a1)
    a.probe("bw_end")
    assert not gpu.recording  # the timed calls after run without it
    ma, mb = a.result(), b.result()
    assert (ma.step_peak_bytes, ma.peak_phase) == (350, "backward")  # 100 + B's 50 + 200
    assert (mb.step_peak_bytes, mb.peak_phase) == (80, "backward")  # above the 100 held at its start


MiB = 1 << 20


def _measure_one_call(gpu, forward, backward):
    rec = measure.CudaRecorder(torch.device("cuda", 0), 2, "memory")
    rec.probe("fw_start")
    kept = forward()
    rec.probe("fw_end")
    rec.probe("bw_start")
    backward(kept)
    rec.probe("bw_end")
    return rec.result()


def test_the_step_peak_counts_the_blocks_the_allocator_handed_out_not_the_requests(monkeypatch, caplog):
    """The allocator's statistics (``max_memory_allocated``, which a memory limit is
    checked against) count blocks: a request rounded up to 512 bytes, or the whole free
    block where the remainder would be too small to keep apart (up to 1 MiB in the large
    pool). The measured step peak is in those bytes, rebuilt from the layout at the
    forward's start."""
    seg = 1 << 32
    gpu = _FakeAllocator(segments=[
        {"device": 0, "address": seg, "total_size": 20 * MiB, "segment_type": "large",
         "blocks": [{"address": seg, "size": 20 * MiB, "state": "inactive"}]},
        {"device": 0, "address": seg + 64 * MiB, "total_size": 2 * MiB, "segment_type": "small",
         "blocks": [{"address": seg + 64 * MiB, "size": 512, "state": "active_allocated"},
                    {"address": seg + 64 * MiB + 512, "size": 2 * MiB - 512, "state": "inactive"}]}])
    gpu.install(monkeypatch)
    gpu.current = 512  # the small block held before

    def forward():
        a = gpu.alloc(3 * MiB + 100, addr=seg, block=3 * MiB + 512)  # split: 17 MiB - 512 remain
        # 16.5 MiB of the 17 MiB - 512 left: under 1 MiB would remain, so the whole block
        b = gpu.alloc(33 * MiB // 2, addr=seg + 3 * MiB + 512, block=17 * MiB - 512)
        c = gpu.alloc(100, addr=seg + 64 * MiB + 512, block=512)  # small pool: 512 bytes
        return a, b, c

    def backward(kept):
        a, b, c = kept
        # A new 12 MiB segment; 11.5 MiB of it leaves 0.5 MiB: the whole segment is the
        # block. No phase's count sees it: it is freed before the backward ends.
        gpu.trace.append({"action": "segment_alloc", "addr": seg + 128 * MiB, "size": 12 * MiB})
        e = gpu.alloc(23 * MiB // 2, addr=seg + 128 * MiB, block=12 * MiB)
        gpu.free(e)
        gpu.free(a)
        gpu.free(c)
        d = gpu.alloc(2 * MiB, addr=seg, block=2 * MiB)  # 1 MiB + 512 remain: split
        gpu.free(d)
        gpu.free(b)

    with caplog.at_level(logging.INFO, logger="offload_compiler.runtime.history"):
        m = _measure_one_call(gpu, forward, backward)
    assert m.step_peak_bytes == 32 * MiB + 512  # requested: 31 MiB + 200 bytes
    assert m.peak_phase == "backward" and "did not fit" not in caplog.text


def test_records_that_do_not_fit_the_layout_add_the_rounding_counted_at_the_phases(monkeypatch, caplog):
    """Where no layout was read (or the records contradict it), the step peak is the
    requested bytes plus what the allocator counted beyond them at the phases around
    the peak, and the log says so."""
    gpu = _FakeAllocator()  # no segments
    gpu.install(monkeypatch)

    def forward():
        return [gpu.alloc(3 * MiB + 100, block=3 * MiB + 512), gpu.alloc(2 * MiB, block=2 * MiB + 700 * 1024)]

    def backward(kept):
        for addr in kept:
            gpu.free(addr)

    with caplog.at_level(logging.INFO, logger="offload_compiler.runtime.history"):
        m = _measure_one_call(gpu, forward, backward)
    assert m.step_peak_bytes == 5 * MiB + 512 + 700 * 1024  # at the forward's end, exactly
    assert "did not fit its layout (no segments were read)" in caplog.text


def test_blocks_are_rebuilt_from_the_layout_and_records_that_contradict_it_say_where():
    from offload_compiler.runtime import blocks

    seg = 1 << 32
    layout = [{"device": 0, "address": seg, "total_size": 20 * MiB,
               "blocks": [{"address": seg, "size": 20 * MiB, "state": "inactive"}]}]
    fits = [{"action": "segment_alloc", "addr": seg + 40 * MiB, "size": 2 * MiB},
            {"action": "alloc", "addr": seg + 40 * MiB, "size": 1000},
            {"action": "alloc", "addr": seg, "size": 19 * MiB + 1},
            {"action": "free_requested", "addr": seg + 40 * MiB, "size": 1000},
            {"action": "free_completed", "addr": seg + 40 * MiB, "size": 1000},
            {"action": "alloc", "addr": seg + 40 * MiB, "size": 4000}]
    assert blocks.block_bytes(layout, fits) == [1024, 20 * MiB, 1024, 4096]
    unfit = {"outside every segment": [{"action": "alloc", "addr": seg + 30 * MiB, "size": 1000}],
             "inside a held block": [{"action": "alloc", "addr": seg, "size": 15 * MiB},
                                     {"action": "alloc", "addr": seg + 14 * MiB, "size": MiB}],
             "where 1048576 are free": [{"action": "alloc", "addr": seg + 19 * MiB, "size": 2 * MiB}],
             "growing in place": [{"action": "segment_map", "addr": seg + 20 * MiB, "size": 2 * MiB}],
             "of no held block": [{"action": "free_requested", "addr": seg, "size": 512}]}
    for why, records in unfit.items():
        with pytest.raises(blocks.Unfit, match=why):
            blocks.block_bytes(layout, records)
    with pytest.raises(blocks.Unfit, match="expandable"):
        blocks.block_bytes([dict(layout[0], is_expandable=True)], fits)
    with pytest.raises(blocks.Unfit, match="no segments"):
        blocks.block_bytes([], fits)


def test_a_timed_call_measures_the_hosts_time_and_its_transfer_ops_part(monkeypatch):
    """The host's time to issue each phase, and the part in the transfer ops' bodies;
    timing events are made before the call (``events``), not inside it."""
    import time

    gpu = _FakeAllocator()
    gpu.install(monkeypatch)
    rec = measure.CudaRecorder(torch.device("cuda", 0), 3, "time", intervals=2)
    assert len(rec.spare) == 4
    op = measure.host_timed(lambda: time.sleep(0.02))
    op()  # not measured: no call is
    rec.probe("fw_start")
    time.sleep(0.03)  # the forward's own kernels
    gpu.alloc(100), gpu.alloc(200)
    op()
    start = measure.copy_started(None)
    measure.copy_done(None, start, "d2h", 1 << 20)
    rec.probe("fw_end")
    rec.probe("bw_start")
    gpu.alloc(300)
    op()
    op()
    rec.probe("bw_end")
    op()
    m = rec.result()
    assert m.transfer_ops == (1, 2) and len(rec.spare) == 2 and m.d2h_bytes == 1 << 20
    assert m.queued_ms == (1.0, 1.0)  # each phase's idle-stream event to its start (1 ms here)
    assert m.allocations == (2, 1)  # the allocator's count at each phase's end less its start
    # The forward's one op: under 50 ms (the op and the forward's own sleep), with room for
    # a loaded machine's oversleep.
    assert 20 <= m.host_transfer_ms[0] < 45 and 40 <= m.host_transfer_ms[1] < 70
    assert 50 <= m.host_fw_ms < 80 and m.host_transfer_ms[1] <= m.host_bw_ms < 70


def test_under_a_limit_a_new_plan_predicted_no_faster_than_the_plan_in_force_is_not_run(source, caplog):
    """Under ``memory_limit``, a plan measured within the limit but twice as slow as
    predicted is planned again; the search, with the times corrected, finds nothing
    faster than the plan in force predicted again with them: the new graph is not run,
    the plan in force stays with the new predictions, and nothing more is measured.
    The new plan is refused as soon as it is made, before its graph is compiled. Where
    the measured peak leaves room, the plan searched for it is faster and runs.
    Gradients bitwise with a run that never re-plans."""
    probe = backend(**OPTIONS, memory_budget=1.0, replan=False)
    _run(probe, steps=1)
    limit = int(probe.plans[0].predicted.baseline_step_peak_bytes * 0.8)
    reference = _run(backend(**OPTIONS, memory_limit=f"{limit}B", replan=False), steps=2 * READ_AT)
    b = backend(**OPTIONS, memory_limit=f"{limit}B")
    fake = source(as_predicted(b.plans, time_scale=2.0))
    with caplog.at_level(logging.INFO, logger="offload_compiler"):
        got = _run(b, steps=2 * READ_AT)
    first, second = b.plans
    assert first.offloaded or first.recomputed
    assert second.replaces == first.graph_id and second.reverted and second.measured is None
    assert b.current_plans == [first] and b.settled and len(fake.asked) == len(MEASURED)
    assert first.predicted.step_ms == pytest.approx(second.predicted.step_ms, rel=1e-6)
    assert first.predicted.step_ms > 1.9 * probe.plans[0].predicted.baseline_step_ms  # kernels twice as slow
    assert f"graph {second.graph_id} not run" in caplog.text and "not run" in second.note
    # Refused before Inductor's (here the eager) compile: planned, never compiled.
    assert f"graph {first.graph_id}: compiled in" in caplog.text
    assert f"graph {second.graph_id}: compiled in" not in caplog.text
    assert_bitwise(reference, got)
    # A measured peak a third of the limit lower: room, and a faster plan to use it.
    b = backend(**OPTIONS, memory_limit=f"{limit}B")
    source(as_predicted(b.plans, peak_extra=-limit // 3))
    _run(b, steps=2 * READ_AT)
    first, second = b.plans
    assert not second.reverted and second.measured is not None and b.current_plans == [second]
