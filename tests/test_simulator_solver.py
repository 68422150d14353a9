"""Table-driven tests of the simulator and the solver on hand-built inputs (no FX)."""

import pytest

from offload_compiler.simulator import KEEP, OFFLOAD, RECOMPUTE, Lanes, SimTensor, simulate
from offload_compiler.solver import Option, solve

MB = 10**6
LANES = Lanes(d2h_gbps=1.0, h2d_gbps=1.0)  # 1 MB copies in 1 ms


def T(name, nbytes, produced, last_fw, first_bw, last_bw, decision=KEEP, rc=0.0):
    return SimTensor(name, nbytes, produced, last_fw, first_bw, last_bw, decision, rc)


def test_copy_fully_hidden():
    # fw: op0 (1 ms) makes A; op1 runs 10 ms while A's 1 ms copy runs: no stall.
    r = simulate([1, 10, 1], [1, 10, 1], [T("A", MB, 0, 0, 2, 2, OFFLOAD)], LANES)
    assert r.stall_ms == 0 and r.step_ms == 24
    assert r.release_after == {"A": 1}       # first op ending after the copy (t=11 >= 2)
    assert r.reload_before == {"A": 1}       # as late as possible: issued at t=13, done 14 < 23
    assert r.hidden_ms["A"] == pytest.approx(1.0)
    assert r.end_of_forward_bytes == 0 and r.peak_bytes == MB


def test_copy_exposed():
    # A takes 10 ms each way; forward and backward are 2 ms each.
    r = simulate([1, 1], [1, 1], [T("A", 10 * MB, 0, 0, 1, 1, OFFLOAD)], LANES)
    # forward: copy 1..11, release at the last op waits 9 ms -> forward ends at 11
    # backward: reload issued at 11 (top), done 21; op1 waits 9 ms -> step 22
    assert r.fw_ms == pytest.approx(11) and r.step_ms == pytest.approx(22)
    assert r.stall_ms == pytest.approx(18)
    assert r.reload_before == {"A": 0}


def test_keep_and_recompute_memory():
    keep = simulate([1, 1], [1, 1], [T("A", MB, 0, 1, 1, 1), T("B", 2 * MB, 1, 1, 0, 0)], LANES)
    assert keep.peak_bytes == 3 * MB and keep.step_ms == 4
    rec = simulate([1, 1], [1, 1], [T("A", MB, 0, 1, 1, 1), T("B", 2 * MB, 1, 1, 0, 0, RECOMPUTE, 0.5)], LANES)
    # B is dropped after forward and rebuilt (0.5 ms) before backward op0
    assert rec.step_ms == pytest.approx(4.5)
    assert rec.end_of_forward_bytes == MB


def test_counted_once_forward_is_done_with_it():
    # A (kept) is read again by op2; B (recomputed) is made and last read by op1.
    # Until op2 ends A is forward's own working memory, held by every plan alike, and
    # B is not held for backward: forward counts A alone, from t=3. In backward B is
    # rebuilt (0.5 ms) for op0 while A is still held: that is the peak.
    r = simulate([1, 1, 1], [1, 1], [T("A", MB, 0, 2, 1, 1), T("B", 2 * MB, 1, 1, 0, 0, RECOMPUTE, 0.5)],
                 LANES, record=True)
    assert r.memory == [(3, MB), (3.5, 3 * MB), (4.5, MB), (5.5, 0)]
    assert r.end_of_forward_bytes == MB
    assert r.peak_bytes == 3 * MB and r.peak_time_ms == 3.5


def test_copy_margin_slows_planned_copies():
    from offload_compiler.planner import lanes_of
    from offload_compiler.hardware import CPU_PROFILE

    lanes = lanes_of(CPU_PROFILE, 0.15)
    assert lanes.d2h_gbps == pytest.approx(8.5) and lanes.h2d_gbps == pytest.approx(8.5)
    assert lanes_of(CPU_PROFILE) == Lanes(10.0, 10.0)


def _opts(names, offload=True, recompute=True):
    return {n: Option(can_offload=offload, can_recompute=recompute,
                      why_not_offload="" if offload else "no", why_not_recompute="" if recompute else "no")
            for n in names}


def test_budget_one_changes_nothing():
    ts = [T("A", MB, 0, 0, 1, 1), T("B", MB, 1, 1, 0, 0)]
    base = simulate([1, 1], [1, 1], ts, LANES)
    sol = solve([1, 1], [1, 1], ts, _opts("AB"), LANES, budget_bytes=base.peak_bytes, max_overhead=0.03)
    assert set(sol.decisions.values()) == {KEEP} and sol.met
    assert all(r.startswith("keep: the budget is met") for r in sol.reasons.values())


def test_hidden_offload_preferred_to_recompute():
    # A's copy hides behind 10 ms of compute; recomputing it would cost 5 ms.
    ts = [T("A", MB, 0, 0, 2, 2, rc=5.0), T("B", MB, 2, 2, 0, 0, rc=5.0)]
    sol = solve([1, 10, 1], [1, 10, 1], ts, _opts("AB"), LANES, budget_bytes=MB, max_overhead=0.03)
    assert sol.decisions == {"A": OFFLOAD, "B": KEEP}
    assert sol.result.step_ms == pytest.approx(sol.baseline.step_ms)
    assert "hidden behind compute" in sol.reasons["A"] and "recompute would cost 5.00 ms" in sol.reasons["A"]


def test_budget_forcing_recompute():
    # Both held at the end of forward: 11 MB. No compute to hide A's 10 ms copy behind;
    # recomputing A costs 0.1 ms, and A then exists only from its backward use on
    # (B is gone by then): peak 10 MB.
    ts = [T("A", 10 * MB, 0, 0, 1, 1, rc=0.1), T("B", MB, 1, 1, 0, 0)]
    sol = solve([1, 1], [1, 1], ts, _opts("AB"), LANES, budget_bytes=10 * MB, max_overhead=0.03)
    assert sol.baseline.peak_bytes == 11 * MB
    assert sol.decisions == {"A": RECOMPUTE, "B": KEEP} and sol.met
    assert sol.result.peak_bytes == 10 * MB
    assert sol.result.step_ms == pytest.approx(4.1)


def test_budget_impossible_is_best_effort_and_says_so():
    ts = [T("A", MB, 0, 0, 1, 1), T("B", MB, 1, 1, 0, 0)]
    sol = solve([1, 1], [1, 1], ts, _opts("AB", offload=False, recompute=False), LANES,
                budget_bytes=0, max_overhead=0.03)
    assert not sol.met and "not reachable" in sol.note
    assert set(sol.decisions.values()) == {KEEP}
    assert sol.reasons["A"] == "keep: cannot be offloaded (no) nor recomputed (no)"


def test_auto_stays_within_overhead():
    # A: hidden copy (free). B: only recompute at 1 ms on a ~24 ms step (4% > 3%).
    ts = [T("A", MB, 0, 0, 2, 2), T("B", MB, 2, 2, 0, 0, rc=1.0)]
    opts = {"A": Option(True, False, why_not_recompute="random"), "B": Option(False, True, why_not_offload="x")}
    sol = solve([1, 10, 1], [1, 10, 1], ts, opts, LANES, budget_bytes=None, max_overhead=0.03)
    assert sol.decisions == {"A": OFFLOAD, "B": KEEP}
    loose = solve([1, 10, 1], [1, 10, 1], ts, opts, LANES, budget_bytes=None, max_overhead=0.10)
    assert loose.decisions == {"A": OFFLOAD, "B": RECOMPUTE}
    assert loose.result.step_ms <= loose.baseline.step_ms * 1.10


def test_host_cap_limits_offloads():
    ts = [T("A", MB, 0, 0, 2, 2), T("B", MB, 0, 0, 2, 2)]
    sol = solve([1, 10, 1], [1, 10, 1], ts, _opts("AB", recompute=False), LANES,
                budget_bytes=0, max_overhead=0.03, host_cap_bytes=MB)
    assert list(sol.decisions.values()).count(OFFLOAD) == 1


def test_forced_tags_are_kept():
    ts = [T("A", MB, 0, 0, 1, 1), T("B", MB, 1, 1, 0, 0)]
    opts = _opts("AB")
    opts["A"] = Option(True, True, forced=KEEP)
    sol = solve([1, 1], [1, 1], ts, opts, LANES, budget_bytes=0, max_overhead=1.0)
    assert sol.decisions["A"] == KEEP and "checkpoint tag" in sol.reasons["A"]
