"""Solver: KEEP, OFFLOAD or RECOMPUTE per saved activation, under a memory budget.

Pure function on plain lists (see :func:`solve`); the timeline simulator scores plans.
Greedy, in up to three phases, each stopping once the predicted activation peak is
within the budget:

1. offloads whose copy the simulator finds hidden behind compute (they cost nothing),
   those dearest to recompute per byte first: the copy engine's time in forward is
   scarce, and cheap pointwise results are better recomputed;
2. whatever remains, cheapest per byte first, by the cheaper of a recomputation and a
   copy that may not hide (each tried in the simulator, the cheaper first);
3. with a fixed budget still not met, offloads traded for recomputations where that
   lowers the peak (copies still in flight during forward can set the peak).

Then, for any budget, a fourth phase exchanges an offload of a value cheap to recompute
for a recomputation of it and an offload of a dearer one (the copy engine's time goes
where it saves most), and a fifth undoes what the peak no longer needs (a change an
early step made that a later one made redundant), dearest first, and swaps the dearest
few changes for cheaper ones that keep the peak where it is.

With ``budget_bytes=None`` (``"auto"``) the target is zero bytes, and a change is
taken only while the predicted step stays within ``(1 + max_overhead)`` times the
baseline's; the fixed-budget solver is then tried over budgets (``budget.
interpolate_budgets``: each try where the line through the plans tried meets the step
limit), and the plan with the least activation peak within the allowed overhead, of
all those tried, is kept.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from typing import Any, Callable

from ..decision import KEEP, OFFLOAD, RECOMPUTE, Decision
from .budget import interpolate_budgets
from .simulator import Lanes, SimResult, SimTensor, copy_ms, simulate


@dataclass(frozen=True)
class Option:
    """What the solver may do with one tensor."""

    can_offload: bool
    can_recompute: bool
    forced: Decision | None = None
    """A decision the user's tag imposes (``MUST_*``)."""
    why_not_offload: str = ""
    why_not_recompute: str = ""


@dataclass
class Solution:
    decisions: dict[str, Decision]
    reasons: dict[str, str]
    result: SimResult
    baseline: SimResult
    budget_bytes: int | None
    met: bool
    """Whether the predicted activation peak is within the budget."""
    note: str = ""
    nbytes: dict[str, int] = dataclasses.field(default_factory=dict)


class SimMemo:
    """Simulated results of one problem by decision set, shared by the greedy runs of
    one :func:`solve` (``"auto"`` runs eleven, each trying many of the same plans) and,
    passed to :func:`solve` again, by later solves of the same problem (the planner's
    ``"auto"`` probes solve the default partition once each). The simulator is a pure
    function of its inputs, so a remembered result is the result a fresh simulation
    gives. Bound to the inputs of its first solve: another problem's raises."""

    def __init__(self) -> None:
        self.results: dict[tuple[Decision, ...], SimResult] = {}
        self.inputs: tuple[Any, ...] | None = None
        self.hits = 0
        """Simulations answered from memory."""
        self.misses = 0
        """Simulations run."""

    def bind(self, inputs: tuple[Any, ...]) -> None:
        if self.inputs is None:
            self.inputs = inputs
        elif self.inputs != inputs:
            raise ValueError("SimMemo: remembered simulations of another problem (ops, tensors, "
                             "lanes, backward outputs or slowed ops differ); use one memo per problem")


#: Tries of ``"auto"``'s search over fixed budgets in the solver's model.
AUTO_SEARCH_STEPS = 10
#: Phase 4 tries this many exchanges: the cheapest offloads to recompute first, each against
#: the kept values dearest to recompute.
EXCHANGE_TRIES = 8
#: Phase 5 tries to swap this many of the dearest decisions for cheaper ones.
SWAP_TRIES = 8


def solve(
    fw_ms: list[float],
    bw_ms: list[float],
    tensors: list[SimTensor],
    options: dict[str, Option],
    lanes: Lanes,
    *,
    budget_bytes: int | None,
    max_overhead: float,
    host_cap_bytes: int | None = None,
    tolerance_ms: float | None = None,
    for_auto: bool = False,
    bw_out_bytes: list[int] | None = None,
    slowed: tuple[list[bool], list[bool]] | None = None,
    memo: SimMemo | None = None,
) -> Solution:
    """Decisions for ``budget_bytes`` (``None``: ``"auto"``); see the module docstring.
    ``for_auto``: a fixed budget that ``"auto"`` chose; reasons are worded for auto.
    ``memo``: simulations remembered from earlier solves of the same problem (and this
    one's, for later solves); without it, remembered for this solve only."""
    memo = memo if memo is not None else SimMemo()
    memo.bind((fw_ms, bw_ms, tensors, lanes, bw_out_bytes, slowed))
    problem = _Problem(fw_ms, bw_ms, tensors, options, lanes, max_overhead, host_cap_bytes,
                       tolerance_ms, bw_out_bytes, slowed, memo)
    best = _greedy(problem, budget_bytes)
    if budget_bytes is not None and not for_auto:
        return best
    if budget_bytes is None:
        # The greedy above moves tensors while the step allows, in one pass; a fixed
        # budget's solver, which may move others instead, can reach a lower peak within
        # the same overhead. Search the budget and keep the lowest peak found.
        limit_ms = best.baseline.step_ms * (1 + max_overhead)
        points = [(best.result.peak_bytes, best.result.step_ms),
                  (best.baseline.peak_bytes, best.baseline.step_ms)]

        def fits(budget: int) -> int | None:
            nonlocal best
            trial = _greedy(problem, budget)
            points.append((trial.result.peak_bytes, trial.result.step_ms))
            if not (trial.met and trial.result.step_ms <= limit_ms):
                return None
            if (trial.result.peak_bytes, trial.result.step_ms) < (best.result.peak_bytes, best.result.step_ms):
                best = trial
            return budget

        interpolate_budgets(0, best.result.peak_bytes, AUTO_SEARCH_STEPS, fits, points, limit_ms,
                            max(1, best.result.peak_bytes // 200))
    reasons = {x.name: _reason(x, best.decisions[x.name], options[x.name], best.result, lanes, False)
               for x in tensors}
    return dataclasses.replace(best, reasons=reasons, budget_bytes=None, met=True, note="")


def bisect_budgets(lo: int, hi: int, steps: int, fits: Callable[[int], int | None], *,
                   resolution: Callable[[int], int] | None = None) -> None:
    """Bisect over budgets in bytes between ``lo`` (missed) and ``hi`` (met), the one
    search ``"auto"`` makes, in the solver's model (:func:`solve`) and on realised
    partitions (``search``). ``fits(budget)`` tries a budget and returns the new upper
    bound when it meets the overhead (the budget, or the peak it reached if lower),
    ``None`` when it does not; the caller keeps the best it saw. At most ``steps``
    tries; with ``resolution``, stops once ``hi - lo <= resolution(hi)``."""
    for _ in range(steps):
        if resolution is not None and hi - lo <= resolution(hi):
            break
        mid = (lo + hi) // 2
        upper = fits(mid)
        if upper is None:
            lo = mid
        else:
            hi = upper


@dataclass
class _Problem:
    """What every greedy run of one :func:`solve` shares (``"auto"`` runs several)."""

    fw_ms: list[float]
    bw_ms: list[float]
    tensors: list[SimTensor]
    options: dict[str, Option]
    lanes: Lanes
    max_overhead: float
    host_cap_bytes: int | None
    tolerance_ms: float | None
    bw_out_bytes: list[int] | None
    slowed: tuple[list[bool], list[bool]] | None
    memo: SimMemo


def _greedy(problem: _Problem, budget_bytes: int | None) -> Solution:
    tensors, options, lanes = problem.tensors, problem.options, problem.lanes
    host_cap_bytes = problem.host_cap_bytes
    by_name = {x.name: x for x in tensors}
    group_size: dict[str, int] = {}
    for x in tensors:
        if x.group:
            group_size[x.group] = group_size.get(x.group, 0) + 1

    def rc_ms(x: SimTensor) -> float:
        """Recompute cost with a group's shared kernels split among its members."""
        if not x.group:
            return x.recompute_ms
        return x.recompute_ms - x.shared_ms * (1 - 1 / group_size[x.group])
    decisions = {x.name: options[x.name].forced or KEEP for x in tensors}

    # Each tensor under each decision, made once: the greedy simulates thousands of trials.
    variants = {(x.name, d): dataclasses.replace(x, decision=d) for x in tensors for d in Decision}

    memo = problem.memo

    def run(dec: dict[str, Decision]) -> SimResult:
        key = tuple(dec[x.name] for x in tensors)
        result = memo.results.get(key)
        if result is not None:
            memo.hits += 1
            return result
        memo.misses += 1
        result = memo.results[key] = simulate(
            problem.fw_ms, problem.bw_ms, [variants[x.name, d] for x, d in zip(tensors, key)],
            lanes, bw_out_bytes=problem.bw_out_bytes, slowed=problem.slowed)
        return result

    def over_host_cap(dec: dict[str, Decision]) -> bool:
        return host_cap_bytes is not None and \
            sum(by_name[n].nbytes for n, d in dec.items() if d == OFFLOAD) > host_cap_bytes

    baseline = run({x.name: KEEP for x in tensors})
    current = run(decisions)
    limit_ms = baseline.step_ms * (1 + problem.max_overhead) if budget_bytes is None else float("inf")
    target = 0 if budget_bytes is None else budget_bytes
    tol = problem.tolerance_ms if problem.tolerance_ms is not None else max(1e-3, 1e-3 * baseline.step_ms)
    reasons: dict[str, str] = {}

    def free(x: SimTensor) -> bool:
        return decisions[x.name] == KEEP and options[x.name].forced is None

    def try_change(x: SimTensor, choice: Decision, max_step: float) -> bool:
        nonlocal current
        trial = {**decisions, x.name: choice}
        if choice == OFFLOAD and over_host_cap(trial):
            return False
        result = run(trial)
        # A lower peak, or the same peak with less held at the end of forward at no cost
        # in time: a change that only moves bytes out of forward (the peak then falls
        # in backward, where the same bytes come back) would cost time for nothing.
        better = result.peak_bytes < current.peak_bytes or (
            result.peak_bytes == current.peak_bytes
            and result.end_of_forward_bytes < current.end_of_forward_bytes
            and result.step_ms <= current.step_ms + tol)
        if result.step_ms > max_step or not better:
            return False
        decisions[x.name] = choice
        current = result
        return True

    # Phase 1: hidden offloads; the copy engine's time is scarce, so tensors dearest to
    # recompute go first (matmul and attention outputs), earlier-produced on ties.
    def recompute_per_byte(x: SimTensor) -> float:
        if not options[x.name].can_recompute:
            return float("inf")
        return rc_ms(x) / max(x.nbytes, 1)

    for x in sorted(tensors, key=lambda x: (-recompute_per_byte(x), x.produced, x.name)):
        if current.peak_bytes <= target:
            break
        if free(x) and options[x.name].can_offload:
            try_change(x, OFFLOAD, min(limit_ms, current.step_ms + tol))
    # Phase 2: the cheaper of a recomputation and a (partly exposed) copy, per byte of
    # what is still over the budget: a tensor larger than the gap earns only the gap
    # (3 ms to recompute a 1 GiB tensor is a poor way to shed the last 6 MiB).
    def round_trip_ms(x: SimTensor) -> float:
        return copy_ms(x.nbytes, lanes.d2h_gbps) + copy_ms(x.nbytes, lanes.h2d_gbps)

    def choices(x: SimTensor) -> list[tuple[float, Decision]]:
        found = [(round_trip_ms(x), OFFLOAD)] if options[x.name].can_offload else []
        if options[x.name].can_recompute:
            found.append((rc_ms(x), RECOMPUTE))
        return sorted(found)

    # What may be done with each tensor, cheapest first, with its cost in ms: fixed for
    # the problem, so worked out once, not at every step of phases 2 and 5.
    priced = {x.name: choices(x) for x in tensors}
    cheapest = {name: min((ms for ms, _ in found), default=float("inf")) for name, found in priced.items()}

    untried = [x for x in tensors if free(x)]
    while untried and current.peak_bytes > target:
        gap = current.peak_bytes - target
        x = min(untried, key=lambda x: (cheapest[x.name] / max(min(x.nbytes, gap), 1), x.name))
        untried.remove(x)
        if not free(x):
            continue
        for _, choice in priced[x.name]:
            if try_change(x, choice, limit_ms):
                break

    # Phase 3 (fixed budgets only): copies in flight during forward can set the peak
    # themselves; where the budget is still not met, trade offloads for recomputation.
    if budget_bytes is not None:
        for x in sorted(tensors, key=lambda x: (rc_ms(x) / max(x.nbytes, 1), x.name)):
            if current.peak_bytes <= target:
                break
            if decisions[x.name] == OFFLOAD and options[x.name].forced is None \
                    and options[x.name].can_recompute:
                try_change(x, RECOMPUTE, limit_ms)

    # Phase 4: the copy engine's time is what an offload spends, and phase 1 gives it to
    # whichever copy hides first: a value cheap to recompute can hold it where a dear
    # one would have hidden in its place (a norm's output offloaded, an attention output
    # kept). Exchange: recompute the cheap one and offload the dear one, where that
    # lowers the peak within the allowed time ("auto") or the step within the bound.
    def exchange_gain(result: SimResult) -> bool:
        if budget_bytes is None:
            return result.peak_bytes < current.peak_bytes and result.step_ms <= limit_ms
        return result.peak_bytes <= max(target, current.peak_bytes) and result.step_ms < current.step_ms - tol

    cheap = sorted((x for x in tensors if decisions[x.name] == OFFLOAD and options[x.name].forced is None
                    and options[x.name].can_recompute), key=lambda x: (recompute_per_byte(x), x.name))
    dear = sorted((x for x in tensors if free(x) and options[x.name].can_offload),
                  key=lambda x: (-recompute_per_byte(x), x.produced, x.name))
    pairs = ((x, y) for x in cheap for y in dear if recompute_per_byte(y) > recompute_per_byte(x))
    for x, y in itertools.islice(pairs, EXCHANGE_TRIES):
        if decisions[x.name] != OFFLOAD or not free(y):  # taken by an earlier exchange
            continue
        trial = {**decisions, x.name: RECOMPUTE, y.name: OFFLOAD}
        if over_host_cap(trial):
            continue
        result = run(trial)
        if exchange_gain(result):
            decisions.update(trial)
            current = result

    # Phase 5: undo what the peak no longer needs. Greedy steps taken early can be made
    # redundant by later ones (the peak moved elsewhere); keep again, dearest first,
    # whatever can be kept without raising the peak above the bound, and faster.
    bound = max(target, current.peak_bytes)

    def undo_gain(x: SimTensor) -> float:
        if decisions[x.name] == RECOMPUTE:
            return rc_ms(x)
        return copy_ms(x.nbytes, lanes.h2d_gbps)

    undoable = [x for x in tensors if decisions[x.name] != KEEP and options[x.name].forced is None]
    for rank, x in enumerate(sorted(undoable, key=lambda x: (-undo_gain(x), x.name))):
        trial = dict(decisions)
        trial[x.name] = KEEP
        result = run(trial)
        # Where keeping x breaks the bound by a little, the cheapest changes that close
        # the gap may cost less than x did (a swap); tried for the dearest few only.
        spent, others = 0.0, [y for y in tensors if trial[y.name] == KEEP and y is not x
                               and options[y.name].forced is None]
        while result.peak_bytes > bound and rank < SWAP_TRIES and others and spent < undo_gain(x):
            gap = result.peak_bytes - bound
            y = min(others, key=lambda y: (cheapest[y.name] / max(min(y.nbytes, gap), 1), y.name))
            others.remove(y)
            for _, choice in priced[y.name]:
                attempt = {**trial, y.name: choice}
                if choice == OFFLOAD and over_host_cap(attempt):
                    continue
                got = run(attempt)
                if got.peak_bytes < result.peak_bytes:
                    trial, result = attempt, got
                    spent += cheapest[y.name]
                    break
        if result.peak_bytes <= bound and result.step_ms < current.step_ms - tol:
            decisions.update(trial)
            current = result

    met = current.peak_bytes <= target if budget_bytes is not None else True
    note = ""
    if budget_bytes is not None and not met:
        note = (f"budget of {budget_bytes} bytes not reachable: best effort predicts "
                f"{current.peak_bytes} bytes")
    for x in tensors:
        reasons[x.name] = _reason(x, decisions[x.name], options[x.name], current, lanes,
                                  met and budget_bytes is not None, fixed=budget_bytes is not None)
    return Solution(decisions, reasons, current, baseline, budget_bytes, met, note,
                    {x.name: x.nbytes for x in tensors})


def _ms(x: float) -> str:
    """Milliseconds, or microseconds below 0.1 ms."""
    return f"{x:.2f} ms" if x >= 0.1 else f"{x * 1e3:.1f} us"


def _reason(x: SimTensor, choice: Decision, opt: Option, result: SimResult, lanes: Lanes, met: bool,
            fixed: bool = False) -> str:
    """Why ``x`` got ``choice``, in words; ``met``: a fixed budget was met; ``fixed``: the
    budget is fixed (a kept value stays where moving it would not lower the peak), not
    ``"auto"`` (where moving it would cost more step time than ``max_overhead`` allows)."""
    copy = copy_ms(x.nbytes, lanes.d2h_gbps)
    rc = _ms(x.recompute_ms) if opt.can_recompute else f"not possible ({opt.why_not_recompute})"
    if opt.can_recompute and x.group and x.shared_ms > 0:
        rc += f" ({_ms(x.shared_ms)} of it shared: run once for all values recomputed from {x.group})"
    if opt.forced:
        return f"{choice}: required by the model's checkpoint tag"
    if choice == OFFLOAD:
        hidden = result.hidden_ms.get(x.name, 0.0)
        return (f"offload: {_ms(copy)} of copy, {_ms(min(hidden, copy))} of it hidden behind "
                f"compute; recompute would cost {rc}")
    if choice == RECOMPUTE:
        off = f"{_ms(copy)} each way" if opt.can_offload else f"not possible ({opt.why_not_offload})"
        return f"recompute: {rc} in backward; offload would copy {off}"
    if not opt.can_offload and not opt.can_recompute:
        return (f"keep: cannot be offloaded ({opt.why_not_offload}) nor recomputed "
                f"({opt.why_not_recompute})")
    if met:
        return "keep: the budget is met without moving it"
    why = "would not lower the predicted activation peak" if fixed else "would exceed the allowed overhead"
    return (f"keep: moving it {why} (offload {_ms(copy)} each way"
            f"{'' if opt.can_offload else ' not possible: ' + opt.why_not_offload}; recompute {rc})")
