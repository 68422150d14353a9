"""How a re-plan, measured, is judged against the plan it replaced.

:func:`worse` says whether the new plan did worse than the one it replaced.
:func:`overhead` is a measured step's cost over the step with nothing moved, as a model
corrected from a measurement predicts that one, and :func:`held_overhead` whether a
re-plan gives way to the plan it replaced on it: how ``"auto"``'s ``max_overhead`` is
held as measured (over a measured step with nothing moved where ``"auto"``'s first plan
moved nothing). Both that and :func:`worse` compare the two plans' measurements as
:func:`as_compared` gives them: each phase at least at the host's time to issue it
(:func:`at_least_host`), the re-plan's at the host's pace of the plan it replaced
(:func:`at_host_pace`). Where ``"auto"``'s re-plan measured past ``max_overhead`` and
the plan it replaced measured slower still (or moved nothing), :func:`once_more` gives
the inputs of one more plan: recomputing only, or searched within ``max_overhead`` less
what the re-plan missed by (:func:`tightened`), or with recomputation priced as
measured (:func:`recompute_fitted`); where a plan measured well within it and its
recomputation cost less than priced, :func:`cheaper_recomputation` gives one more plan
with it so priced. Under ``memory_limit``, :func:`no_faster` keeps the plan in force
over a new one predicted no faster. :func:`step_text` and :func:`percent`
say a step and an overhead in the log's words.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .replan import TOLERANCE, Corrections, over_limit, paced, paced_phases, repredicted


def worse(new: Any, old: Any, old_corrections: Corrections, tolerance: float = TOLERANCE) -> bool:
    """Whether a re-planned graph's measurement ``new`` is worse than ``old``, its former
    plan's: slower by more than ``tolerance`` and no less memory at the step peak. Never
    where ``old`` went over ``memory_limit``."""
    if old is None or over_limit(old, old_corrections):
        return False
    return (new.step_ms > old.step_ms * (1 + tolerance)
            and (new.step_peak_bytes or 0) >= (old.step_peak_bytes or 0))


def overhead(step_ms: float, predicted: Any, corrections: Corrections) -> float | None:
    """A measured step of ``step_ms`` over the step with nothing moved, less 1, where
    ``predicted`` (a ``Predictions``) was made with ``corrections`` fitted to a
    measurement: its ``baseline_step_ms`` is then the unmodified step as that
    measurement explains it (the kernels' scales, the host, the bandwidths). ``None``
    where nothing corrected the model (its baseline is an estimate, not worth holding a
    measurement to) or there is nothing to compare.

    A re-plan's corrections are fitted to the plan it replaced, kernels and moves
    together; where the new plan then measures slower than predicted, what it moves
    (more recomputation, more transfer ops) cost more than the fit says, not the
    kernels both plans run, so the baseline stays as fitted and the difference counts
    as overhead."""
    if corrections.measured_call is None or step_ms <= 0 or predicted.baseline_step_ms <= 0:
        return None
    return step_ms / predicted.baseline_step_ms - 1


def held_overhead(new_ms: float, old_ms: float, predicted: Any, corrections: Corrections,
                  max_overhead: float | None, unmoved: tuple[float, float] | None = None,
                  ) -> tuple[float, float | None, bool] | None:
    """``"auto"`` holding ``max_overhead`` on a re-plan measured at ``new_ms`` whose
    replaced plan measured ``old_ms``: both plans' :func:`overhead` (``predicted``, the
    re-plan's, was made with ``corrections``, fitted to the replaced plan's measurement)
    and whether the re-plan gives way, being more than ``max_overhead`` over the step
    with nothing moved where the replaced plan measured faster. ``None`` where the
    overhead is not held on the measurement: a fixed budget (``max_overhead`` ``None``),
    ``memory_limit`` (the limit decides), or no fitted step with nothing moved.

    ``unmoved``: where the graph's first plan moved nothing and was measured, the new
    plan's step and that plan's, each at least its host's time (:func:`at_least_host`);
    the overheads are then measured over measured, not over the model's step with
    nothing moved (a fit to a plan that moves things explained ResNet-50's step with
    nothing moved 4% to 29% off: ``benchmarks/RESULTS.md``, session 40)."""
    if max_overhead is None or corrections.limit_bytes is not None:
        return None
    if unmoved is not None:
        at, base = unmoved
        new, old = at / base - 1, old_ms / base - 1
    else:
        new, old = overhead(new_ms, predicted, corrections), overhead(old_ms, predicted, corrections)
    if new is None:
        return None
    return new, old, new > max_overhead and old_ms < new_ms


def at_least_host(measured: Any) -> Any:
    """``measured`` (a ``Measured``) with each phase at least the host's time to issue it:
    how long it takes in steady state, what a re-plan and the plan it replaced are
    compared on (:func:`worse`, :func:`held_overhead`). A phase's span runs from the GPU
    reaching its start to its end; where the GPU was still behind at the start (a backlog
    of the phase before), the span is shorter than the host's issue of a phase the host
    paces, and the next step waits for the host instead (ResNet-50's first plan on an
    H100, session 34: a forward of 10.76 ms on the GPU issued in 15.49 ms; timed at
    33.86 ms, its steps ran 37.0 ms back to back). ``measured`` itself where nothing
    changes (no host measured, or the host ahead in both phases)."""
    phases = {name: host for name, ms, host in (("fw_ms", measured.fw_ms, measured.host_fw_ms),
                                                 ("bw_ms", measured.bw_ms, measured.host_bw_ms))
              if host is not None and host > ms}
    return dataclasses.replace(measured, **phases) if phases else measured


def at_host_pace(new: Any, new_kernels: tuple[int, int], old: Any, old_kernels: tuple[int, int]) -> Any:
    """``new`` (a ``Measured``) with each phase the host paced taken at the host's pace
    per kernel in ``old`` (the measurement of the plan it replaced), where the host ran
    slower in ``new``: what a re-plan is judged on against the plan it replaced
    (:func:`worse`, :func:`held_overhead`). ``*_kernels``: the plans' ops that take GPU
    time (``Predictions.kernels``).

    The host's pace is not the plan's: ResNet-50's forward (the same 362 launches) took
    the host 10.9 ms with 36 transfer ops among them in one plan's timed calls, and
    13.8 ms with none in the next plan's, a few steps later (an H100,
    ``benchmarks/RESULTS.md``, session 34); the second plan was given up for 27% over a
    step with nothing moved that the first pace had explained. Judged at one pace, a
    phase's time goes down by the difference in pace over its kernels (its transfer
    ops' host time, the plan's own, stays), but not below its kernels and stalls as
    timed with the host ahead (``ahead_compute_ms``); a phase without that timing, or
    not paced, stays as measured. ``new`` itself where nothing changes."""
    phases = {}
    aheads = getattr(new, "ahead_compute_ms", (None, None))
    stalls = (new.fw_stall_ms, new.stall_ms - new.fw_stall_ms)
    for p, (name, ms, host, old_host) in enumerate((("fw_ms", new.fw_ms, new.host_fw_ms, old.host_fw_ms),
                                                    ("bw_ms", new.bw_ms, new.host_bw_ms, old.host_bw_ms))):
        if aheads[p] is None or old_host is None or not paced(host, ms) or not (new_kernels[p] and old_kernels[p]):
            continue
        rate = (host - new.host_transfer_ms[p]) / new_kernels[p]
        old_rate = (old_host - old.host_transfer_ms[p]) / old_kernels[p]
        if rate > old_rate:
            phases[name] = max(aheads[p] + stalls[p], ms - (rate - old_rate) * new_kernels[p])
    return dataclasses.replace(new, **phases) if phases else new


def as_compared(new: Any, new_kernels: tuple[int, int], old: Any, old_kernels: tuple[int, int]) -> tuple[Any, Any]:
    """A re-plan's measurement ``new`` and that of the plan it replaced, ``old``, as
    :func:`worse` and :func:`held_overhead` compare them: each phase at least its host's
    time (:func:`at_least_host`), the new one at ``old``'s host pace (:func:`at_host_pace`).
    Each is the measurement itself where nothing changes it."""
    return at_host_pace(at_least_host(new), new_kernels, old, old_kernels), at_least_host(old)


def tightened(corrections: Corrections, measured: float, predicted: Any) -> Corrections | None:
    """The inputs of one more ``"auto"`` plan where its re-plan, ``predicted`` with
    ``corrections``, measured ``measured`` over the step with nothing moved (its
    :func:`overhead`), past what it predicted of itself, and past ``max_overhead``: the
    search then holds ``max_overhead`` less the miss (``Corrections.overhead_margin``,
    added to any before). The kernels' fit stays the one the baseline was explained by.
    ``None`` where the prediction was not under the measurement."""
    planned = overhead(predicted.step_ms, predicted, corrections)
    if planned is None or measured <= planned:
        return None
    miss = measured - planned
    return dataclasses.replace(corrections, overhead_margin=corrections.overhead_margin + miss)


def once_more(corrections: Corrections, measured: float, predicted: Any, timed: Any, offloaded: bool,
              unmoved: tuple[Any, Any, Corrections] | None) -> Corrections | None:
    """The inputs of ``"auto"``'s one more plan where its re-plan (``predicted`` with
    ``corrections``, measured as ``timed``: ``measured`` over the step with nothing
    moved) went past ``max_overhead``. ``unmoved``: where that step was measured, the
    plan that moved nothing (its predictions, its measurement, the inputs it was made
    with).

    Where the re-plan offloaded (``offloaded``) with the host pacing a phase of it, the
    host cost of its transfer graph is what the model missed, and the fit to nothing
    moved explains a graph without transfer ops (which keeps Inductor's buffer pool):
    the next plan recomputes only (``Corrections.recompute_only``). On an H200 (session
    41), ViT-B/16's re-plan with 27 values offloaded issued its backward in 20.03 ms
    (5.11 in 108 transfer ops, 557 allocations) against 11.46 ms (322) with nothing
    moved, and ran 1.19x Inductor's step. Where it offloaded nothing and its
    recomputations cost more than priced (:func:`recompute_fitted`), the next plan prices
    them as measured. Otherwise :func:`tightened`."""
    if unmoved and offloaded and any(paced_phases(timed)):
        return dataclasses.replace(corrections, recompute_only=True)
    fitted = _fitted_apart(corrections, predicted, timed, offloaded, unmoved)
    if fitted is not None and fitted.recompute_scale > corrections.recompute_scale * (1 + TOLERANCE):
        return fitted
    return tightened(corrections, measured, predicted)


def cheaper_recomputation(corrections: Corrections, overhead: float | None, max_overhead: float | None,
                          predicted: Any, timed: Any, offloaded: bool,
                          unmoved: tuple[Any, Any, Corrections] | None) -> Corrections | None:
    """``"auto"``: the inputs of one more plan where a plan (``predicted`` with
    ``corrections``, measured as ``timed``, ``overhead`` over the step with nothing moved
    as measured: ``unmoved``, as :func:`once_more` takes it) offloaded nothing, measured
    within half of ``max_overhead``, and its recomputations cost less than priced
    (:func:`recompute_fitted`, by more than the tolerance): priced as measured, the
    search may recompute more in the overhead left. Once: ``None`` where recomputation
    was fitted already. On an H200 (session 42) ViT-B/16's plan recomputing 40 values
    measured 0.7% over the step with nothing moved (predicted 3.0%): its recomputations
    added 0.24 ms to the backward with nothing moved, priced at about 0.9 ms.

    Cheaper is claimed only beyond the timings' noise: the fit takes the plan's backward
    ``RECOMPUTE_FIT_MIN`` of itself longer than measured. The plan searched on the fit
    recomputes more than the one measured, so a factor read from noise is extrapolated:
    in session 43 ViT-B/16's 35 recomputations added 0.13 ms to a backward of 19.2 ms,
    the point fit hit its bound (x0.25), and the plan made on it recomputed 70 values
    and measured 9.1% over the step with nothing moved, its recomputations near x0.7."""
    if overhead is None or max_overhead is None or overhead > max_overhead / 2 or corrections.recompute_scale != 1.0:
        return None
    fitted = _fitted_apart(corrections, predicted, timed, offloaded, unmoved, allowance=RECOMPUTE_FIT_MIN)
    if fitted is None or fitted.recompute_scale * (1 + TOLERANCE) >= corrections.recompute_scale:
        return None
    return fitted


def _fitted_apart(corrections: Corrections, predicted: Any, timed: Any, offloaded: bool,
                  unmoved: tuple[Any, Any, Corrections] | None, allowance: float = 0.0) -> Corrections | None:
    """:func:`recompute_fitted` where it applies: against a measured step with nothing
    moved (``unmoved``), for a plan that offloaded nothing (copies running beside the
    backward slow its kernels too, which the fit would count as recomputation)."""
    if unmoved is None or offloaded:
        return None
    return recompute_fitted(corrections, predicted, timed, *unmoved, allowance=allowance)


def once_more_text(again: Corrections | None, max_overhead: float) -> str:
    """How the log says what :func:`once_more` gave (``again``): ``""`` for nothing."""
    if again is None:
        return ""
    if again.recompute_only:
        return ", and planning once more, recomputing only (its host paced a phase with transfer ops)"
    if not again.overhead_margin:
        return f", and planning once more with recomputation priced as measured (x{again.recompute_scale:.2f})"
    return f", and planning once more within {percent(max_overhead)} less what it missed by"


#: Recomputation is fitted (:func:`recompute_fitted`) only where a plan's predicted
#: recomputation exceeds nothing moved's by at least this fraction of its measured
#: backward (less, and the timings' noise is most of the difference), and to a factor
#: within ``RECOMPUTE_FIT_RANGE`` of 1 (beyond it, the bound): a backward timed 1% off
#: moves the factor of ViT-B/16's 40 recomputations (0.24 ms measured, about 0.9 priced)
#: by about 0.2.
RECOMPUTE_FIT_MIN = 0.02
RECOMPUTE_FIT_RANGE = 4.0


def backward_kernels_ms(measured: Any) -> float | None:
    """A measured backward's kernels: timed with the host ahead, or its compute where the
    host did not pace it; ``None`` where neither was measured."""
    ahead = getattr(measured, "ahead_compute_ms", (None, None))[1]
    if ahead:
        return ahead
    if paced(measured.host_bw_ms, measured.bw_ms) or measured.bw_compute_ms <= 0:
        return None
    return measured.bw_compute_ms


def recompute_fitted(corrections: Corrections, predicted: Any, timed: Any, unmoved_predicted: Any,
                     unmoved_timed: Any, unmoved_corrections: Corrections, allowance: float = 0.0,
                     ) -> Corrections | None:
    """``corrections`` (a plan's inputs, fitted to the measured step with nothing moved)
    with the backward's kernel scale and recomputation's scale both fitted: the backward's
    time of the plan that moved nothing and of a plan that recomputes (``predicted`` with
    ``corrections``, measured as ``timed``, offloading nothing), each its ops other than
    recomputations at one scale plus its recomputations at that scale times another
    (``Corrections.recompute_scale``), both as measured. ``None`` where either
    backward's kernels were not measured (:func:`backward_kernels_ms`), the plan
    recomputes too little more than nothing moved does (``RECOMPUTE_FIT_MIN``), or only
    a factor of 0 or less fits (the timings' noise); a factor past ``RECOMPUTE_FIT_RANGE``
    is taken at its bound. ``allowance``: the plan's backward is fitted that fraction of
    itself longer than measured (the noise's upper end, where a low factor is risky).

    One scale for all kernels misses it both ways. On an H200, ResNet-50's plan with 48
    values recomputed ran its backward's kernels in 15.39 ms against 13.60 predicted from
    the step with nothing moved (session 41), and ViT-B/16's with 40 recomputed added
    0.24 ms to the backward with nothing moved, priced at about 0.9 ms (session 42)."""
    measured = backward_kernels_ms(timed), backward_kernels_ms(unmoved_timed)
    if None in measured:
        return None

    def raw(p: Any, c: Corrections) -> tuple[float, float]:  # other ops, recomputations: unscaled
        return (p.bw_compute_ms - p.bw_recompute_ms) / c.bw_scale, p.bw_recompute_ms / (c.bw_scale * c.recompute_scale)

    (n1, r1), (n0, r0) = raw(predicted, corrections), raw(unmoved_predicted, unmoved_corrections)
    m1, m0 = measured[0] * (1 + allowance), measured[1]
    more = (r1 - r0) * corrections.bw_scale * corrections.recompute_scale
    if more < RECOMPUTE_FIT_MIN * m1 or m0 * r1 - m1 * r0 <= 0:
        return None
    scale = (m1 * n0 - m0 * n1) / (m0 * r1 - m1 * r0)
    if scale <= 0:
        return None
    scale = min(max(scale, 1 / RECOMPUTE_FIT_RANGE), RECOMPUTE_FIT_RANGE)
    return dataclasses.replace(corrections, bw_scale=m0 / (n0 + scale * r0), recompute_scale=scale)


def no_faster(new: Any, plan: Any, planned_with: Corrections, corrections: Corrections) -> Any:
    """Under ``memory_limit``: the plan in force (``plan``, a ``GraphPlan`` made with
    ``planned_with``, measured within the limit) predicted again with ``corrections``,
    fitted to its measurement, where the plan just searched with them (``new``) is
    predicted no faster than that: running ``new`` gains nothing the model can see, and
    the plan in force stays (``new`` is refused before it is compiled). ``None``
    otherwise: no limit, ``plan`` measured over it, or it cannot be simulated again.

    The search under a limit keeps the fastest of its budget probes, and the plan in
    force need not be among them. On an H200 (session 43) ResNet-50's first plan under a
    4080 MiB limit left 303 MiB unused; the plan searched for that room was predicted at
    22.23 ms against 22.08 for the plan in force, measured 28.73 against 23.26 ms, and
    was given up after three timed steps."""
    if (new is None or new.predicted is None or corrections.limit_bytes is None or plan.measured is None
            or over_limit(plan.measured, planned_with) or plan.resimulate is None
            or corrections.measured_call != plan.measured.call):
        return None
    again = repredicted(plan.predicted, plan.resimulate, planned_with, corrections, new.predicted)
    return again if new.predicted.step_ms >= again.step_ms else None


class NoFaster:
    """:func:`no_faster` as one re-plan's veto (``plan``, ``planned_with`` and
    ``corrections`` as there), its last verdict kept (``verdict``): a refused plan is not
    judged a second time after its compile was stopped."""

    def __init__(self, plan: Any, planned_with: Corrections, corrections: Corrections) -> None:
        self.plan, self.planned_with, self.corrections, self.verdict = plan, planned_with, corrections, None

    def __call__(self, new: Any) -> Any:
        self.verdict = no_faster(new, self.plan, self.planned_with, self.corrections)
        return self.verdict


def within_margin(config: Any, corrections: Corrections) -> Any:
    """``config`` (an ``OffloadConfig``) as ``"auto"``'s search holds it under
    ``corrections``: ``max_overhead`` less ``overhead_margin`` (not below 0), and with
    ``recompute_only`` no host memory to offload to (``max_host_bytes`` 0)."""
    if corrections.recompute_only:
        config = dataclasses.replace(config, max_host_bytes=0)
    if not corrections.overhead_margin:
        return config
    return dataclasses.replace(config, max_overhead=max(0.0, config.max_overhead - corrections.overhead_margin))


def step_text(judged: Any, timed: Any) -> str:
    """A measured step as judged: ``12.30 ms``, or ``11.20 ms (12.30 ms measured)``."""
    if judged is timed:
        return f"{timed.step_ms:.2f} ms"
    return f"{judged.step_ms:.2f} ms ({timed.step_ms:.2f} ms measured)"


def percent(fraction: float) -> str:
    """``fraction`` in per cent: ``4.1%``."""
    return f"{fraction * 100:.1f}%"
