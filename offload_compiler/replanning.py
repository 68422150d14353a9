"""The compiled graph as the backend hands it to Dynamo: measured in its first calls,
planned again once if the measurement contradicts the plan.

:class:`MeasuredGraph` runs the inner compiler's callable. After the first step (host
memory pinned, the backward compiled) it measures memory on one call (the allocator's
records) and time on ``TIMED_CALLS`` calls a step apart (events; the median is the
measurement), through ``runtime.measure.source``; a graph called N times per step
measures its middle call. A phase the host paced (``planning.replan.paced_phases``) gets
one more call with the GPU held until the host has issued it (``"kernels"``). Where
prediction and measurement disagree beyond the tolerance, or the step went over
``memory_limit``, it plans again from the corrected inputs (``planning.replan.corrected``),
compiles again and runs the new graph from this call on, a step boundary; at most
``MAX_REPLANS`` times (``MAX_LIMIT_REPLANS`` over the limit). Under a limit, a new plan
predicted no faster than the one in force is not run (``planning.judging.no_faster``).
The new plan is measured again and given up where it measured worse than the one it
replaced (``planning.judging.as_compared``; ``GraphPlan.reverted``). With ``"auto"``, a
first plan that moves nothing is the step ``max_overhead`` is held against; a new plan
past it is planned once more (``judging.once_more``) or gives way, one well within it
is planned once more where recomputation cost less (``judging.cheaper_recomputation``).
A re-plan's timed calls alternate with calls of nothing moved, timed too (``"beside"``:
that graph, compiled already, runs the step; its gradients are the plan's), and the
overhead is held against those (``verdicts.py``; where its step fits the device): a step measured a dozen steps earlier differs from one measured
now by more than the 3% judged (Inductor's own step drifted 93.7 to 97.4 ms over the
GPT preset's interleaved rounds, ``benchmarks/RESULTS.md``, session 48). Where the
source of measurements cannot time that graph, the earlier measurement stands.
Each measurement is logged, put on the plan (``GraphPlan.measured``) and in the dump."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable

import torch

from .nbytes import nbytes_text
from .planning.judging import NoFaster, cheaper_recomputation, percent, step_text, worse
from .planning.replan import (MAX_TRUSTED_RATIO, Corrections, corrected, disagreements, over_limit,
                              paced_phases, repredicted, trusted)
from .reporting.dump import write_measured
from .reporting.records import GraphPlan
from .runtime import measure
from .runtime.backward_hooks import on_backward
from .runtime.pool import host_pool
from .verdicts import Verdicts

log = logging.getLogger("offload_compiler")

#: Backward passes of a graph before it is measured (the first step pins host memory and
#: compiles the backward; a graph called per block makes every call before its first ends).
WARMUP_BACKWARDS = 1
#: Times a timed call disturbed by the host pool (a block allocated or released) is measured again.
MAX_REMEASURES = 3
#: Calls of a plan timed, a step apart; the median (``measure.typical``) is its measurement:
#: first plans' first timed calls measured 18% (ViT-B/16) and 26% (ResNet-50) over their
#: second, and the fastest of two as far below later steps (``benchmarks/RESULTS.md``, sessions 30-32).
TIMED_CALLS = 3
#: A paced phase's hold (the ``"kernels"`` call): this many times the host's time to issue it
#: in the median timed call, plus ``HOLD_EXTRA_MS`` (the host runs at two speeds, one up to
#: twice the other: ``benchmarks/RESULTS.md``, session 31).
HOLD_FACTOR = 2.5
HOLD_EXTRA_MS = 2.0
#: Re-plans per graph: a measurement that still disagrees after one is reported, not acted on.
MAX_REPLANS = 1
MAX_LIMIT_REPLANS = 3  # re-plans while the measured step goes over ``memory_limit``
#: Steps until a graph's measurements and re-plans are over, at most: each plan's warm-up,
#: memory call, timed calls (and as many of nothing moved beside them) and kernels call (each read a step
#: later), for the first plan and every
#: re-plan ``memory_limit`` allows, more than ``"auto"``'s (undisturbed: a re-measure adds steps).
SETTLE_STEPS = (WARMUP_BACKWARDS + 1 + 2 * (2 * TIMED_CALLS + 1)) * (1 + MAX_LIMIT_REPLANS)
#: Calls after the measured ones to wait for their backward before giving up.
GIVE_UP_CALLS = 10_000

Recompile = Callable[[Corrections, list, Any], "tuple[Callable[..., Any] | None, GraphPlan | None]"]


class MeasuredGraph(Verdicts):
    """A compiled graph that measures its first calls and may plan itself again once."""

    def __init__(self, compiled: Callable[..., Any], plan: GraphPlan | None, device: torch.device,
                 corrections: Corrections, recompile: Recompile | None, *,
                 max_overhead: float | None = None) -> None:
        self.compiled = compiled
        self.max_overhead = max_overhead  # "auto"'s; None for a fixed budget
        self.plan = plan
        self.device = device
        self.corrections = corrections
        self.recompile = recompile
        self.calls = 0  # calls of the current compiled graph
        self.replans = self.remeasures = 0
        self.again: Corrections | None = None  # "auto" past max_overhead: the inputs of one more plan
        self.overhead: float | None = None  # "auto": the last plan judged, over the step with nothing moved
        self.backwards = 0  # backward passes of the current compiled graph seen to end
        self.per_step = 1  # calls in the first step (before the first call's backward ended)
        self.first: int | None = None  # the call measured for memory
        self.timed_at: int | None = None  # the call measured for time
        self.time_from = 0  # the first call that may be timed (next)
        self.timings: list[Any] = []  # the plan's timed calls so far (``Measured``)
        self.memory: Any = None  # the plan's memory measurement (``Measured``)
        self.kernels: Any = None  # its "kernels" call (``Measured``), where one was asked for
        self.hold: tuple[float, float] | None = None  # the "kernels" call's holds, until it is made
        self.warming = False  # a call's backward is watched to end the warm-up
        self.recorders: dict[str, Any] = {}
        self.disturbed = False  # the host pool allocated or released during the timed call
        # (compiled, plan, corrections): the plan a re-plan replaced, until the new one measures
        # no worse; "auto"'s first plan where it moved nothing, measured.
        self.previous: tuple[Callable[..., Any], GraphPlan, Corrections] | None = None
        self.unmoved: tuple[Callable[..., Any], GraphPlan, Corrections] | None = None
        self.beside: list[Any] | None = []  # nothing moved, timed beside this plan; None: it cannot be
        self.done = plan is None or plan.predicted is None

    def __call__(self, *args: Any) -> Any:
        if self.done:
            return self.compiled(*args)
        self.calls += 1
        if self.first is None:
            return self._warm_up(args)
        if (self.timed_at is not None and self.calls > self.timed_at
                and all(r.complete() for r, _ in self.recorders.values())):
            self._evaluate(list(args))  # both measured calls finished their backward
            if self.done:
                return self.compiled(*args)
            if self.first is None:  # planned again: the new graph warms up first
                return self._warm_up(args)
        elif self.calls > self.time_from + GIVE_UP_CALLS:
            self._abandon()
            return self.compiled(*args)
        what = None
        if self.calls == self.first:
            what = "memory"
        elif self.timed_at is None and self.calls >= self.time_from and self._memory_done():
            # the memory call's, a step later (or the first call after its backward)
            what = ("beside" if self._beside_due() and self._beside_fits() else "time") if self.hold is None \
                else "kernels"
        if what is None or not torch.is_grad_enabled():
            if what == "memory":
                self.first += 1  # measure a training call
            return self.compiled(*args)
        # Each offloaded value: a copy and a wait in the forward, the same in the backward.
        intervals = 4 * len(self.plan.offloaded) if what not in ("memory", "beside") else 0
        held = {"hold_ms": self.hold} if what == "kernels" else {}
        recorder = measure.source.recorder(self.device, self.calls, what, intervals, **held)
        if recorder is None and what == "beside":  # the earlier measurement of nothing moved stands
            self.beside = None
            what, intervals = "time", 4 * len(self.plan.offloaded)
            recorder = measure.source.recorder(self.device, self.calls, what, intervals)
        run = self.unmoved[0] if what == "beside" else self.compiled
        if what != "memory":
            self.timed_at = self.calls
        if recorder is None:
            return self.compiled(*args)
        pool = host_pool()
        changes = pool.changes
        recorder.probe("fw_start")
        out = run(*args)
        recorder.probe("fw_end")

        def backward_done() -> None:
            recorder.probe("bw_end")
            if what in ("time", "beside") and pool.changes != changes:
                self.disturbed = True

        handles = on_backward(args, out, backward_done, lambda: recorder.probe("bw_start"))
        if handles is None:
            recorder.abort()
            if what == "memory":
                self.first += 1
            else:
                self.timed_at = None
            return out
        self.recorders[what] = (recorder, handles)
        return out

    def _memory_done(self) -> bool:
        """The memory call's backward has ended (or it could not be measured): a timed
        call started now runs without the allocator's recording."""
        got = self.recorders.get("memory")
        return got is None or got[0].complete()

    def _warm_up(self, args: tuple) -> Any:
        """Run a call of the warm-up; the first training call's backward ends it."""
        out = self.compiled(*args)
        if not self.warming and torch.is_grad_enabled():
            self.warming = on_backward(args, out, self._warmed) is not None
        return out

    def _warmed(self) -> None:
        self.backwards += 1
        self.warming = False
        if self.backwards >= WARMUP_BACKWARDS:
            # Every call so far ran before the first one's backward ended: one step's.
            self.per_step = max(1, self.calls)
            self.first = self.calls + 1 + self.per_step // 2
            self.time_from = self.first + self.per_step
        # else the next training call is watched

    def _abandon(self) -> None:
        """The measured calls' backward never ran: measure nothing more."""
        for recorder, handles in self.recorders.values():
            for h in handles:
                h.remove()
            recorder.abort()
        self.recorders = {}
        self.done = True
        log.info("offload: graph %d: not measured (the backward of a measured call did not run)",
                 self.plan.graph_id)

    def _evaluate(self, args: list) -> None:
        """Read the measurements of the calls measured last: keep a timing, time again, or
        compare the plan with its measurement and plan again if it calls for it."""
        results = {}
        for what, (recorder, handles) in self.recorders.items():
            for h in handles:
                h.remove()
            got = recorder.result()
            if got is None:
                recorder.abort()
            results[what] = got
        self.recorders = {}
        timed, memory = results.get("time"), results.get("memory")
        if "kernels" in results:
            self.kernels, self.hold = results["kernels"] or False, None  # False: asked, not measured
        disturbed, self.disturbed = self.disturbed, False
        if disturbed and self.remeasures < MAX_REMEASURES:
            self.remeasures += 1
            self.first = self.calls + self.per_step // 2  # measured again from this step
            self.time_from, self.timed_at = self.first + self.per_step, None
            log.info("offload: graph %d: the host pool pinned or released memory during the timed call; "
                     "measuring again (%d/%d)", self.plan.graph_id, self.remeasures, MAX_REMEASURES)
            return
        self.memory = memory or self.memory
        if "beside" in results:
            if results["beside"] is None:
                self.beside = None
            else:
                self.beside.append(results["beside"])
        if timed is not None or "beside" in results:
            if timed is not None:
                self.timings.append(timed)
            if len(self.timings) < TIMED_CALLS or self._beside_due():  # a step after this one (not after its wait)
                self.time_from, self.timed_at = self.calls + self.per_step + self.per_step // 2, None
                return
        if not self.timings:
            self.done = True  # a backward did not run, or nothing could be measured: no re-plan
            return
        timed = measure.typical(self.timings)
        if self.kernels is None and self.recompile is not None and any(paced_phases(timed)):
            # Its time shows the host's pace: time the kernels, a step after this call.
            self.hold = tuple(HOLD_FACTOR * h + HOLD_EXTRA_MS for h in (timed.host_fw_ms, timed.host_bw_ms))
            self.time_from, self.timed_at = self.calls + self.per_step + self.per_step // 2, None
            return
        timed.timed_ms = tuple(m.step_ms for m in self.timings)
        if self.kernels:
            timed.ahead_compute_ms = self.kernels.ahead_compute_ms
        if self.memory is not None:
            for name in ("held_before_bytes", "step_peak_bytes", "peak_phase", "holders"):
                setattr(timed, name, getattr(self.memory, name))
        plan = self.plan
        plan.measured = timed
        log.info("offload: measured %s", plan.measured_text())
        for holder in timed.holders:
            log.debug("offload: graph %d: at the measured peak: %s", plan.graph_id, holder)
        if log.isEnabledFor(logging.DEBUG):  # naming them reads the graph's nodes
            for holder in plan.predicted_holders():
                log.debug("offload: graph %d: at the predicted peak: %s", plan.graph_id, holder)
        if self.beside and self.unmoved:
            base = self._measured_of(self.unmoved[1])
            beside = (f"graph {self.unmoved[1].graph_id} (nothing moved) timed beside it, a step apart: "
                      f"{step_text(base, base)} ({', '.join(f'{m.step_ms:.2f}' for m in self.beside)} ms)")
            log.info("offload: graph %d: %s", plan.graph_id, beside)
            plan.note = f"{plan.note}; {beside}" if plan.note else beside
        write_measured(plan)
        if self.previous is not None:
            _, before, before_corrections = self.previous
            judged, old = self._judged(timed, before)
            over = self._over_overhead(judged, timed, old, before)  # first: it may go back further
            if over or worse(judged, old, before_corrections):
                self._revert(over or f"measured {step_text(judged, timed)} and "
                             f"{nbytes_text(timed.step_peak_bytes or 0)} at its step peak, worse than graph "
                             f"{before.graph_id}'s {step_text(old, self._measured_of(before))} and "
                             f"{nbytes_text(old.step_peak_bytes or 0)}")
                return
            self.previous, again, self.again = None, self.again, None
            if again is not None:
                self._plan_again(again, args, [f"\"auto\" measured past max_overhead {percent(self.max_overhead)}"])
                return
            again = cheaper_recomputation(self.corrections, self.overhead, self.max_overhead, plan.predicted, timed,
                                          bool(plan.offloaded), self._unmoved_measured())
            if again is not None and self.recompile is not None:
                self._plan_again(again, args, [f"\"auto\" measured {percent(self.overhead)} over the step with nothing "
                                               "moved, its recomputations cheaper than priced"])
                return
        why = disagreements(plan.predicted, timed, self.corrections)
        unsearched = plan.provisional and self.recompile is not None  # planned again, measured or not
        if why and not trusted(plan.predicted, timed):
            log.warning("offload: graph %d: the measured step (%.2f ms) is more than %gx from the predicted one "
                        "(%.2f ms): more likely a measurement of something else (other graphs' work inside this "
                        "graph's forward or backward) than of this plan; %s", plan.graph_id, timed.step_ms,
                        MAX_TRUSTED_RATIO, plan.predicted.step_ms, "planning again from the estimates (\"auto\" "
                        "searches now)" if unsearched else "keeping the plan")
            if not unsearched:
                self.done = True
                return
            self._plan_again(self.corrections, args, ["\"auto\"'s first plan was not searched"], "the estimates")
            return
        if unsearched and plan.moves_nothing:
            self.unmoved = (self.compiled, plan, self.corrections)  # what overheads are measured against
            why = ["\"auto\"'s first plan moved nothing: measured, it is the step max_overhead is held against", *why]
        elif unsearched and not why:
            why = ["\"auto\"'s first plan was not searched; the measurement agrees with it"]
        over = over_limit(timed, self.corrections)
        allowed = MAX_LIMIT_REPLANS if over else MAX_REPLANS
        if not why or self.replans >= allowed or self.recompile is None:
            if over:
                log.warning("offload: graph %d: the measured step goes over memory_limit by %s after %d re-plan(s) "
                            "(%s); keeping this plan", plan.graph_id, nbytes_text(over), self.replans, "; ".join(why))
            elif why and self.recompile is None:
                log.info("offload: graph %d: measured only, not planned again (a graph with dynamic sizes, or "
                         "policy=\"all\"): %s", plan.graph_id, "; ".join(why))
            elif why:
                log.warning("offload: graph %d: the re-planned prediction still differs from the measurement (%s); "
                            "keeping this plan", plan.graph_id, "; ".join(why))
            self.done = True
            return
        self._plan_again(corrected(self.corrections, plan.predicted, timed, plan.resimulate), args, why)

    def _plan_again(self, corrections: Corrections, args: list, why: list[str],
                    source: str = "the measurement") -> None:
        """Plan and compile the graph again with ``corrections``; the call being made runs it."""
        plan = self.plan
        log.info("offload: graph %d: planning again from %s (%s): %s", plan.graph_id, source, "; ".join(why),
                 corrections.describe())
        refused = NoFaster(plan, self.corrections, corrections)
        compiled, new_plan = self.recompile(corrections, args, refused)  # judged before it is compiled
        kept = refused.verdict if compiled is None else None  # no callable: the veto refused it
        if kept is not None:  # the plan in force stays, predicted again with the new inputs
            why = (f"predicted {kept.step_ms:.2f} ms with the new inputs; graph {new_plan.graph_id}, searched with "
                   f"them, {new_plan.predicted.step_ms:.2f} ms: kept, graph {new_plan.graph_id} not run")
            new_plan.replaces, new_plan.reverted, new_plan.note = plan.graph_id, True, f"predicted no faster than " \
                f"graph {plan.graph_id}; not run"
            plan.predicted, plan.corrections, self.corrections, self.done = kept, dataclasses.asdict(corrections), \
                corrections, True
            plan.note = f"{plan.note}; {why}" if plan.note else why
            log.info("offload: graph %d: %s", plan.graph_id, why)
            write_measured(plan)
            return
        if new_plan is not None:
            new_plan.replaces = plan.graph_id
            self.previous = (self.compiled, plan, self.corrections)
        self.compiled, self.plan, self.corrections = compiled, new_plan, corrections
        self.replans += 1
        self.backwards = self.remeasures = 0
        self.timings, self.memory, self.kernels, self.hold, self.first, self.timed_at = [], None, None, None, None, None
        self.beside = []
        self.calls = 1  # the call being made runs the new graph: its first
        self.done = new_plan is None or new_plan.predicted is None

    def _revert(self, reason: str) -> None:
        """Go back to the plan the current one replaced (measured better: ``reason``).
        Where the current plan's corrections were fitted to that plan's measurement, they
        stay, and that plan's predictions are made again with them: what the corrected
        model predicts for the plan in force, not the estimates it was first made with."""
        compiled, before, corrections = self.previous
        plan, self.previous = self.plan, None
        plan.reverted = True
        why = f"{reason}: given up, graph {before.graph_id} runs again"
        plan.note = f"{plan.note}; {why}" if plan.note else why
        log.warning("offload: graph %d: the new plan %s; going back to that plan", plan.graph_id, reason)
        # The corrections were fitted to ``before``'s measurement (not the estimates a
        # re-plan past MAX_TRUSTED_RATIO starts from), and its timeline can be simulated again.
        if self.corrections.measured_call == before.measured.call and before.resimulate is not None:
            was = before.predicted
            before.predicted = repredicted(was, before.resimulate, corrections, self.corrections, plan.predicted)
            before.corrections = dataclasses.asdict(self.corrections)
            again = (f"predictions made again from its measurement (from the estimates: step {was.step_ms:.2f} ms, "
                     f"step peak {nbytes_text(was.step_peak_bytes)})")
            before.note = f"{before.note}; {again}" if before.note else again
            log.info("offload: graph %d runs again, %s: %s", before.graph_id, again, before.measured_text())
            write_measured(before)
            corrections = self.corrections
        self.compiled, self.plan, self.corrections = compiled, before, corrections
        self.done = True

