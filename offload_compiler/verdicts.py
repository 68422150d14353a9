"""How a re-planned graph is judged against the plan it replaced and against nothing
moved (``"auto"``): :class:`Verdicts`, the part of ``replanning.MeasuredGraph`` that reads
its measurements against theirs. The rules are ``planning/judging.py``'s; this is where
the graph's state meets them: which measurement of nothing moved counts (its calls timed
beside the plan's, :meth:`Verdicts._measured_of`), and what the graph does past
``max_overhead`` (:meth:`Verdicts._over_overhead`)."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from .nbytes import nbytes_text
from .planning import limits
from .planning.judging import as_compared, at_least_host, held_overhead, once_more, once_more_text, percent, step_text
from .planning.replan import Corrections
from .reporting.records import GraphPlan
from .runtime import measure

log = logging.getLogger("offload_compiler")

#: Nothing moved is timed beside a re-plan only where its measured step peak, this many times
#: over, fits beside what is allocated then (the caching allocator's blocks, split and cached,
#: are not all reusable at once: ``limits.DEVICE_MARGIN`` is held back besides).
BESIDE_MARGIN = 1.25


class Verdicts:
    """``MeasuredGraph``'s judgement of its new plan (its attributes: ``plan``, ``previous``,
    ``unmoved``, ``beside``, ``timings``, ``corrections``, ``max_overhead``, ``again``,
    ``overhead``, ``recompile``)."""

    def _beside_due(self) -> bool:
        """Whether the next timed call is one of nothing moved, beside this plan's: ``"auto"``
        judges this plan against it, and it has fewer such calls than this plan has timed."""
        return (self.beside is not None and self.unmoved is not None and self.previous is not None
                and self.max_overhead is not None and not self.plan.moves_nothing
                and len(self.beside) < len(self.timings))

    def _beside_fits(self) -> bool:
        """Whether nothing moved's step, as measured (its step peak ``BESIDE_MARGIN`` times
        over), fits with what is allocated now in what the device can give (``limits.room``).
        Where it does not, it is not timed beside this plan (said once), and its first
        measurement stands: a step that ran out of memory would end the training."""
        got, base = limits.room(self.device), self.unmoved[1]
        peak = base.measured.step_peak_bytes
        if got is not None and peak is not None and peak * BESIDE_MARGIN + got[1] <= got[0]:
            return True
        self.beside = None
        log.info("offload: graph %d: graph %d (nothing moved) is not timed beside it: %s; it is judged against "
                 "graph %d's first measurement", self.plan.graph_id, base.graph_id,
                 "not on a CUDA device, or its step peak was not measured" if got is None or peak is None else
                 f"its measured step peak ({nbytes_text(peak)}) {BESIDE_MARGIN}x over and the "
                 f"{nbytes_text(got[1])} allocated now exceed the {nbytes_text(got[0])} the device can give",
                 base.graph_id)
        return False

    def _measured_of(self, plan: GraphPlan) -> Any:
        """``plan``'s measurement as this plan is judged against it: for nothing moved, its
        calls timed beside this plan's where there are any (with its measured memory)."""
        if not (self.beside and self.unmoved and plan is self.unmoved[1]):
            return plan.measured
        base = measure.typical(self.beside)
        return dataclasses.replace(base, timed_ms=tuple(m.step_ms for m in self.beside), **{
            name: getattr(plan.measured, name) for name in ("held_before_bytes", "step_peak_bytes", "peak_phase",
                                                            "holders")})

    def _judged(self, timed: Any, before: GraphPlan) -> tuple[Any, Any]:
        """The new plan's measurement ``timed`` and ``before``'s (:meth:`_measured_of`) as
        they are compared (``planning.judging.as_compared``), logged where that changes either."""
        measured = self._measured_of(before)
        judged, old = as_compared(timed, self.plan.predicted.kernels, measured, before.predicted.kernels)
        if judged is not timed or old is not measured:
            log.info("offload: graph %d: judged with each phase at least its host's time, at graph %d's host pace: "
                     "step %s; graph %d: %s", self.plan.graph_id, before.graph_id, step_text(judged, timed),
                     before.graph_id, step_text(old, measured))
        return judged, old

    def _over_overhead(self, judged: Any, timed: Any, old: Any, before: GraphPlan) -> str | None:
        """``"auto"``: why the new plan, measured as ``timed`` (``judged``, and ``old`` for
        ``before``, the plan it replaced: as :meth:`_judged` compares them), gives way:
        more than ``max_overhead`` over the step with nothing moved (the first plan's
        measurement where it moved nothing, ``self.unmoved``; else as the model corrected
        from ``before``'s predicts it), to ``before`` where it measured faster, to nothing
        moved where it was planned once more and ``before`` is past it too; else ``None``,
        and past it, one more plan (``self.again``). The measured overhead is logged and
        kept (``self.overhead``)."""
        plan, unmoved, base = self.plan, None, self.unmoved and self.unmoved[1]
        self.overhead = None
        if plan.moves_nothing:
            return None  # nothing moved has no overhead; its measurements differ by the host's noise
        if base is not None:  # each at its own host's pace: the host a plan costs is the plan's
            unmoved = at_least_host(timed).step_ms, at_least_host(self._measured_of(base)).step_ms
        held = held_overhead(judged.step_ms, old.step_ms, plan.predicted, self.corrections, self.max_overhead, unmoved)
        if held is None:
            return None
        new, old_overhead, gives_way = held
        self.overhead = new
        baseline = (f"{plan.predicted.baseline_step_ms:.2f} ms with nothing moved, as graph "
                    f"{before.graph_id}'s measurement explains it") if unmoved is None else (
            f"{unmoved[1]:.2f} ms with nothing moved, as graph {base.graph_id} measured it"
            f"{' beside this plan' if self.beside else ''}")
        log.info("offload: graph %d: \"auto\" measured %s %s the step with nothing moved (%s; "
                 "max_overhead %s)", plan.graph_id, percent(abs(new)), "over" if new >= 0 else "under",
                 baseline, percent(self.max_overhead))
        if base and self.corrections.planned_once_more and min(new, old_overhead) > self.max_overhead:  # both past it
            self.previous, before.reverted = self.unmoved, True  # nothing moved is the plan within it
            before.note = "; ".join(filter(None, (before.note, f"given up with graph {plan.graph_id}")))
            return (f"measured {step_text(judged, timed)}, {percent(new)} over {baseline}, past max_overhead "
                    f"{percent(self.max_overhead)} as graph {before.graph_id} was ({percent(old_overhead)})")
        if new > self.max_overhead and not self.corrections.planned_once_more and self.recompile is not None and (
                not gives_way or before is base):  # past nothing moved itself, before giving way to it
            self.again = once_more(self.corrections, new, plan.predicted, timed, bool(plan.offloaded),
                                   self._unmoved_measured())
            if self.again and before is base and self.again.overhead_margin >= self.max_overhead:
                self.again = None  # within no overhead, nothing moves: that is ``before``
            gives_way = gives_way and self.again is None
        if not gives_way:
            if new > self.max_overhead:
                log.warning("offload: graph %d: \"auto\" measured %s over the step with nothing moved, past "
                            "max_overhead %s; %s%s", plan.graph_id, percent(new), percent(self.max_overhead),
                            f"the plan it replaced (graph {before.graph_id}) measured {percent(old_overhead)}: "
                            "keeping the faster" if before is not base else "keeping it for now",
                            once_more_text(self.again, self.max_overhead))
            return None
        return (f"measured {step_text(judged, timed)}, {percent(new)} over {baseline}, past max_overhead "
                f"{percent(self.max_overhead)}; graph {before.graph_id} measured "
                f"{step_text(old, self._measured_of(before))} "
                f"({percent(old_overhead)})")

    def _unmoved_measured(self) -> tuple[Any, Any, Corrections] | None:  # predictions, measurement, inputs
        return self.unmoved and (self.unmoved[1].predicted, self._measured_of(self.unmoved[1]), self.unmoved[2])
