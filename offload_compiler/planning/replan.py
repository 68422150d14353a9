"""Planning again from a measurement: what the planner corrects, and when.

A plan is made from estimates: node times from a roofline, copy bandwidth from a
calibration, memory from a model of Inductor's buffers. :class:`Corrections` are the
inputs a measured call of the compiled graph (``runtime.measure.Measured``) corrects:

- ``fw_scale`` / ``bw_scale``: every node time of that phase is multiplied by it
  (recomputations are forward ops: ``fw_scale``). Fitted (:func:`fitted_scales`): the
  factor under which the measured plan, simulated again with the measured host and
  bandwidths, takes each phase's measured time; so the time the GPU waited for the host
  counts once, in the host lane, not also in the kernels' scale. Without a simulation
  of the plan (one from the plan cache): measured compute (the call's time less the
  time compute waited for copies) over the estimate. Either way not in a phase the host
  paced (host time at least ``HOST_BOUND`` of its GPU time: its time says nothing of
  the kernels). Where a phase's compute was measured with the host ahead of the GPU
  (``Measured.ahead_compute_ms``, a call timed with the GPU held until the host had
  issued the phase, made where one phase was paced), its scale is that over its
  estimate, paced or not: the GPU's own time, not a fit through the host lane. A paced
  phase without it: at the first fit it
  goes halfway, geometrically, to the other phase's scale, capped at its own measured
  compute over its estimate, and a later fit keeps the scale fitted before. Neither
  extreme holds across models (``benchmarks/RESULTS.md``, session 31, H100): ViT-B/16's
  forward kernels ran 1.20x their estimate, its backward's 1.33x; ResNet-50's 1.46x and
  2.18x. Left at 1, ViT-B/16's step with nothing moved was predicted 8.7% under
  Inductor's; given the other phase's scale, ResNet-50's re-plan was predicted 30.5%
  over its measurement (its forward at 14.5 ms against 9.7);
- ``recompute_scale``: recomputations' times besides, fitted by ``judging.recompute_fitted``
  to the step with nothing moved and a plan that recomputes, both measured (``"auto"``);
- ``host_us`` / ``op_host_us``: the host's time per op that takes GPU time (the
  phase's host time less its transfer ops, over ``Predictions.kernels``) and per
  transfer op (``TRANSFER_OP_KERNELS`` kernels' until one is measured), forward and
  backward: the simulator's host lane (``Lanes.host_us``);
  ``queued_ms``, GPU work queued when each phase started: its head start (``host_lead_ms``);
- ``d2h_gbps`` / ``h2d_gbps``: the copies' measured bandwidth;
- ``unmodelled_bytes``: measured step peak less the predicted one; added to every
  predicted step peak after it;
- ``held_before_bytes`` / ``limit_bytes``: with ``memory_limit``, what was allocated when
  the forward started and the limit; plans fit ``held_before + step peak`` under it;
- ``first_steps_bytes``: with ``memory_limit``, before a measurement, bytes held back for
  what the first steps leave held before the forward (``limits.FIRST_STEPS_FACTOR``).

:func:`disagreements` says whether a measurement is far enough from the prediction to
plan again (``TOLERANCE``), :func:`trusted` whether it is near enough to be one of this
plan (``MAX_TRUSTED_RATIO``) and :func:`corrected` gives the new inputs; how the new
plan, measured in turn, is judged against the one it replaced is ``judging.py``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

from ..nbytes import nbytes_text

#: Relative error of a prediction, against the measurement, that makes the backend plan again.
TOLERANCE = 0.05
#: A phase whose host time is at least this fraction of its GPU time was paced by the host.
HOST_BOUND = 0.9
#: A compute scale is fitted (``fitted_scales``) to within this fraction of a phase's
#: measured time, searched over factors within ``FIT_RANGE`` of the previous scale, in
#: ``FIT_STEPS`` halvings (a factor known to 16**(2**-12), 0.07%).
FIT_SLACK = 0.002
FIT_RANGE = 16.0
FIT_STEPS = 12
#: A measured step this many times longer or shorter than predicted is not acted on: the
#: planner's errors measured on the zoo stay within 2x; a larger gap has measured other
#: work (HF Llama compiled one block at a time: 104 ms measured against 10.9 ms predicted
#: for one block, the whole step's backward inside one block's span).
MAX_TRUSTED_RATIO = 3.0
#: Copies smaller than this in all do not correct the bandwidth (too little to time well).
MIN_TIMED_COPY_BYTES = 16 << 20
#: A transfer op's host time in kernels' (``host_us``), where a measurement fitted the host
#: with no transfer op in it (``"auto"``'s first plan moved nothing): ten fits of plans
#: with transfer ops (HF Llama, ResNet-50, ViT-B/16 on H100s, ``benchmarks/RESULTS.md``,
#: sessions 16 to 35) put it at 1.6 to 5.4 kernels', 2.5 in the middle.
TRANSFER_OP_KERNELS = 2.5
#: Granularity of the bytes available under ``memory_limit``, as a power of two below
#: the amount (2**-8 of it at most): plans and cache keys do not change with every MiB the
#: allocator happens to hold at compile time.
AVAILABLE_BITS = 8


@dataclass(frozen=True)
class Corrections:
    """Planner inputs corrected from a measurement (the defaults correct nothing)."""

    fw_scale: float = 1.0
    bw_scale: float = 1.0
    d2h_gbps: float | None = None
    h2d_gbps: float | None = None
    unmodelled_bytes: int = 0
    held_before_bytes: int = 0
    limit_bytes: int | None = None
    first_steps_bytes: int = 0
    host_us: tuple[float, float] = (0.0, 0.0)
    op_host_us: tuple[float, float] = (0.0, 0.0)
    queued_ms: tuple[float, float] | None = None
    overhead_margin: float = 0.0
    """``"auto"``: what a re-plan measured over its predicted overhead (``judging.tightened``);
    the search holds ``max_overhead`` less this."""
    recompute_only: bool = False
    """``"auto"``: the search moves nothing to the host (``judging.once_more``)."""
    recompute_scale: float = 1.0
    """Recomputations' measured cost over their estimate, on top of their phase's scale
    (``judging.recompute_fitted``): the backward ops that read no gradient, and the
    search's price of recomputing a value."""
    measured_call: int | None = None
    """The call of the compiled graph these come from (``None``: not measured)."""

    @property
    def planned_once_more(self) -> bool:
        """``"auto"``'s plan made once more past ``max_overhead`` (``judging.once_more``):
        within a margin, recomputing only, or with recomputation priced as measured. Such a
        plan is not planned again for it."""
        return bool(self.overhead_margin) or self.recompute_only or self.recompute_scale != 1.0

    @property
    def available_bytes(self) -> int | None:
        """Bytes the step may take above what is held before it, under ``memory_limit``
        (rounded down, ``AVAILABLE_BITS``); ``None`` without a limit."""
        if self.limit_bytes is None:
            return None
        free = self.limit_bytes - self.held_before_bytes - self.first_steps_bytes
        step = 1 << max(0, free.bit_length() - AVAILABLE_BITS)
        return free - free % step if free > 0 else free

    def key(self) -> str:
        """What the plan cache and Inductor's cache key on: the inputs a plan depends on."""
        fields = dataclasses.asdict(self)
        fields.pop("measured_call")
        fields.pop("held_before_bytes")
        fields.pop("limit_bytes")
        fields.pop("first_steps_bytes")
        fields["available_bytes"] = self.available_bytes
        return repr(sorted((k, round(v, 4) if isinstance(v, float) else v) for k, v in fields.items()))

    def describe(self) -> str:
        """The corrected inputs in one line, as the re-plan log says them."""
        text = (f"kernel times x{self.fw_scale:.2f} forward, x{self.bw_scale:.2f} backward; host "
                f"{self.host_us[0]:.1f}/{self.host_us[1]:.1f} us per kernel and "
                f"{self.op_host_us[0]:.1f}/{self.op_host_us[1]:.1f} us per transfer op (forward/backward)")
        if self.queued_ms:
            text += (f", GPU work queued when the forward starts {self.queued_ms[0]:.2f} ms and "
                     f"the backward {self.queued_ms[1]:.2f} ms")
        if self.overhead_margin:
            text += f"; \"auto\" within max_overhead less {self.overhead_margin * 100:.1f}%"
        if self.recompute_only:
            text += "; \"auto\" recomputes only (nothing offloaded)"
        if self.recompute_scale != 1.0:
            text += f"; recomputation x{self.recompute_scale:.2f} its estimate, as measured"
        for name, gbps in (("D2H", self.d2h_gbps), ("H2D", self.h2d_gbps)):
            if gbps:
                text += f"; {name} copies at {gbps:.1f} GB/s"
        if self.unmodelled_bytes:
            sign = "+" if self.unmodelled_bytes > 0 else "-"
            text += f"; step peaks {sign}{nbytes_text(abs(self.unmodelled_bytes))} (what the model does not see)"
        return text

    def hardware(self) -> dict[str, float]:
        """Overrides of the hardware profile: the measured bandwidths."""
        return {k: v for k, v in (("d2h_gbps", self.d2h_gbps), ("h2d_gbps", self.h2d_gbps)) if v}


def disagreements(predicted: Any, measured: Any, corrections: Corrections,
                  tolerance: float = TOLERANCE) -> list[str]:
    """Why ``measured`` (a ``Measured``) calls for a new plan, in words; empty when the
    prediction (a ``Predictions``, already corrected by ``corrections``) holds."""
    out = []
    if measured.step_ms > 0 and abs(predicted.step_ms - measured.step_ms) > tolerance * measured.step_ms:
        out.append(f"step {measured.step_ms:.2f} ms measured, {predicted.step_ms:.2f} ms predicted")
    if measured.step_peak_bytes:
        if abs(predicted.step_peak_bytes - measured.step_peak_bytes) > tolerance * measured.step_peak_bytes:
            out.append(f"step peak {nbytes_text(measured.step_peak_bytes)} measured, "
                       f"{nbytes_text(predicted.step_peak_bytes)} predicted")
        if over_limit(measured, corrections):
            total = measured.held_before_bytes + measured.step_peak_bytes
            out.append(f"{nbytes_text(total)} at the peak (with {nbytes_text(measured.held_before_bytes)} held "
                       f"before the forward) is over memory_limit {nbytes_text(corrections.limit_bytes)}")
    room = unreserved(predicted, measured, corrections)
    if room:
        out.append(f"{nbytes_text(measured.held_before_bytes)} held before the forward and the step peak leave "
                   f"{nbytes_text(room)} of memory_limit unused (the plan held back "
                   f"{nbytes_text(corrections.first_steps_bytes)} for the first steps)")
    return out


def unreserved(predicted: Any, measured: Any, corrections: Corrections, tolerance: float = TOLERANCE) -> int:
    """Bytes of ``memory_limit`` a plan made with ``first_steps_bytes`` held back left
    unused, as measured (what was held before the forward, and the step peak), where
    more than ``tolerance`` of what the limit leaves the step and the plan moves
    something (``predicted`` below the step peak with nothing moved: a faster plan may
    use the room); else 0."""
    if (not corrections.first_steps_bytes or measured.held_before_bytes is None or corrections.limit_bytes is None
            or not measured.step_peak_bytes or predicted.step_peak_bytes >= predicted.baseline_step_peak_bytes):
        return 0
    left = corrections.limit_bytes - measured.held_before_bytes
    room = left - measured.step_peak_bytes
    return room if room > tolerance * left else 0


def over_limit(measured: Any, corrections: Corrections) -> int:
    """Bytes by which ``measured``'s step (with what was held before it) went over
    ``memory_limit``; 0 when it did not, or without a limit."""
    if corrections.limit_bytes is None or measured.held_before_bytes is None or not measured.step_peak_bytes:
        return 0
    return max(0, measured.held_before_bytes + measured.step_peak_bytes - corrections.limit_bytes)


def repredicted(predicted: Any, resimulate: Callable[..., Any], planned_with: Corrections,
                corrections: Corrections, baseline: Any) -> Any:
    """A measured plan's ``predicted`` (a ``Predictions``, made with ``planned_with``)
    made again with ``corrections``, fitted to that plan's own measurement: the plan
    simulated again (``resimulate``, ``GraphPlan.resimulate``) with the fitted kernel
    scales, the measured host and bandwidths, as the fit explains the measurement; its
    memory as planned, with the bytes the model did not see as ``corrections`` counts
    them. The step with nothing moved comes from ``baseline``, a ``Predictions`` made
    with ``corrections``."""
    k = (corrections.fw_scale / planned_with.fw_scale, corrections.bw_scale / planned_with.bw_scale,
         corrections.recompute_scale / planned_with.recompute_scale)
    final = resimulate(*k, host_us=corrections.host_us, op_host_us=corrections.op_host_us,
                       host_lead_ms=corrections.queued_ms, bound_lead=False, **corrections.hardware())
    unmodelled = corrections.unmodelled_bytes - planned_with.unmodelled_bytes
    return dataclasses.replace(
        predicted, peak_time_ms=final.peak_time_ms, step_peak_bytes=predicted.step_peak_bytes + unmodelled,
        step_ms=final.step_ms, stall_ms=final.stall_ms, fw_compute_ms=predicted.fw_compute_ms * k[0],
        bw_compute_ms=(predicted.bw_compute_ms + predicted.bw_recompute_ms * (k[2] - 1)) * k[1],
        bw_recompute_ms=predicted.bw_recompute_ms * k[1] * k[2],
        baseline_step_ms=baseline.baseline_step_ms,
        baseline_step_peak_bytes=baseline.baseline_step_peak_bytes)


def corrected(previous: Corrections, predicted: Any, measured: Any,
              resimulate: Callable[..., Any] | None = None) -> Corrections:
    """New planner inputs: ``previous`` corrected by how ``measured`` differs from
    ``predicted`` (made with ``previous``). ``resimulate``: the measured plan simulated
    again (``GraphPlan.resimulate``), to fit the compute scales with."""
    changes: dict[str, Any] = {"measured_call": measured.call}
    fw_compute, bw_compute = measured.fw_compute_ms, measured.bw_compute_ms
    fw_host, bw_host = measured.host_fw_ms, measured.host_bw_ms
    ratios = [1.0, 1.0]  # each phase's new scale over its previous one
    by_host = paced_phases(measured)
    if predicted.fw_compute_ms > 0 and fw_compute > 0 and not by_host[0]:
        ratios[0] = fw_compute / predicted.fw_compute_ms
    if predicted.bw_compute_ms > 0 and bw_compute > 0 and not by_host[1]:
        ratios[1] = bw_compute / predicted.bw_compute_ms
    estimates = (predicted.fw_compute_ms, predicted.bw_compute_ms)
    ahead = tuple(ms if ms and estimate > 0 else None for ms, estimate
                  in zip(getattr(measured, "ahead_compute_ms", (None, None)), estimates))
    for p, ms in enumerate(ahead):  # the phase's kernels, timed with the host ahead
        if ms is not None:
            ratios[p] = ms / estimates[p]
    kept = tuple(h or ms is not None for h, ms in zip(by_host, ahead))  # not fitted to the timed call
    if fw_host is not None and bw_host is not None and all(predicted.kernels):
        ops_ms, calls = measured.host_transfer_ms, measured.transfer_ops
        changes["host_us"] = tuple(round(max(0.0, host - ops) / n * 1e3, 1) for host, ops, n in
                                   zip((fw_host, bw_host), ops_ms, predicted.kernels))
        changes["op_host_us"] = tuple(round(ms / n * 1e3, 1) if n else before or round(TRANSFER_OP_KERNELS * host, 1)
                                      for ms, n, before, host in zip(ops_ms, calls, previous.op_host_us,
                                                                     changes["host_us"]))
    queued = getattr(measured, "queued_ms", (None, None))
    if None not in queued:
        changes["queued_ms"] = tuple(round(ms, 2) for ms in queued)
    if measured.d2h_bytes >= MIN_TIMED_COPY_BYTES and measured.d2h_gbps:
        changes["d2h_gbps"] = measured.d2h_gbps
    if measured.h2d_bytes >= MIN_TIMED_COPY_BYTES and measured.h2d_gbps:
        changes["h2d_gbps"] = measured.h2d_gbps
    lanes = {"host_us": changes.get("host_us", previous.host_us),
             "op_host_us": changes.get("op_host_us", previous.op_host_us),
             "host_lead_ms": changes.get("queued_ms", previous.queued_ms), "bound_lead": False,
             **{k: changes[k] for k in ("d2h_gbps", "h2d_gbps") if k in changes}}
    fits = resimulate is not None and measured.fw_ms > 0 and measured.bw_ms > 0 and not all(kept)
    if fits:
        ratios = fitted_scales(resimulate, measured, ratios, kept, lanes)
    if previous.measured_call is None and by_host.count(True) == 1 and ahead[by_host.index(True)] is None:
        # The first fit, one phase paced, its kernels not timed: its scale goes halfway
        # (geometrically) to the other phase's, as far as its own measured compute allows
        # (its kernels ran within it).
        p = by_host.index(True)
        scales, computes = (previous.fw_scale, previous.bw_scale), (fw_compute, bw_compute)
        if estimates[p] > 0 and computes[p] > 0:
            guess = list(ratios)
            toward = scales[1 - p] * ratios[1 - p] / scales[p]
            guess[p] = min(toward ** 0.5, computes[p] / estimates[p])
            ratios = fitted_scales(resimulate, measured, guess, kept, lanes) if fits else guess
    if ratios[0] != 1.0:
        changes["fw_scale"] = previous.fw_scale * ratios[0]
    if ratios[1] != 1.0:
        changes["bw_scale"] = previous.bw_scale * ratios[1]
    if measured.step_peak_bytes is not None:
        changes["unmodelled_bytes"] = (previous.unmodelled_bytes
                                       + measured.step_peak_bytes - predicted.step_peak_bytes)
    if measured.held_before_bytes is not None and previous.limit_bytes is not None:
        changes["held_before_bytes"], changes["first_steps_bytes"] = measured.held_before_bytes, 0
    return dataclasses.replace(previous, **changes)


def fitted_scales(resimulate: Callable[..., Any], measured: Any, guess: list[float],
                  kept: tuple[bool, bool], lanes: dict[str, Any]) -> list[float]:
    """Factors on the forward's and the backward's op times under which the measured plan,
    simulated again with ``lanes`` (the measured host and bandwidths), takes as long per
    phase as measured: the forward's first, then the backward's with it. A phase the host
    paced, or whose kernels were timed with the host ahead (``kept``), keeps ``guess``
    (1, or that timing over the estimate): a host model that spreads the host's time
    evenly over the ops leaves some of its waits to be explained, and they are not the
    kernels' (on an H100, ResNet-50's paced forward was fitted to 2.9x its kernels'
    estimate, and the step with nothing moved predicted that much slower). ``guess``
    (measured compute over predicted, per phase) is taken where it already fits within
    ``FIT_SLACK``, then 1. Otherwise the factor nearest 1 that fits: where the host
    held parts of the phase back, it takes as long over a range of factors, and the
    kernels' time is left as near what it was as the measurement allows. Where no
    factor within ``FIT_RANGE`` fits (the host lane alone is longer than the phase,
    say), ``guess``."""
    def phase_ms(k: float, phase: int, fw_k: float) -> float:
        result = resimulate(k, 1.0, **lanes) if phase == 0 else resimulate(fw_k, k, **lanes)
        return (result.fw_ms, result.bw_ms)[phase]

    fitted: list[float] = []
    for phase, target in enumerate((measured.fw_ms, measured.bw_ms)):
        fw_k = fitted[0] if fitted else 1.0
        if kept[phase]:  # paced (its time says nothing of the kernels), or its kernels timed apart
            fitted.append(guess[phase])
            continue
        at_guess = phase_ms(guess[phase], phase, fw_k)
        if abs(at_guess - target) <= FIT_SLACK * target:
            fitted.append(guess[phase])
            continue
        at_one = at_guess if guess[phase] == 1.0 else phase_ms(1.0, phase, fw_k)
        if abs(at_one - target) <= FIT_SLACK * target:
            fitted.append(1.0)
            continue
        # phase_ms never falls as k grows: bisect (geometrically) between 1 and the bound
        # on the side of the measurement, for the factor nearest 1 that reaches it.
        up = at_one < target
        lo, hi = (1.0, FIT_RANGE) if up else (1.0 / FIT_RANGE, 1.0)
        bound_ms = phase_ms(hi if up else lo, phase, fw_k)
        if (bound_ms < target) if up else (bound_ms > target):  # no factor in range fits
            fitted.append(guess[phase])
            continue
        for _ in range(FIT_STEPS):
            mid = (lo * hi) ** 0.5
            ms = phase_ms(mid, phase, fw_k)
            if (ms < target) if up else (ms <= target):
                lo = mid
            else:
                hi = mid
        fitted.append(hi if up else lo)
    return fitted


class MemoryLimitError(RuntimeError):
    """No plan fits ``memory_limit``; the message says by how much."""


def paced_phases(measured: Any) -> tuple[bool, bool]:
    """Whether the host paced ``measured``'s forward, and its backward (:func:`paced`)."""
    return (paced(measured.host_fw_ms, measured.fw_ms), paced(measured.host_bw_ms, measured.bw_ms))


def paced(host_ms: float | None, gpu_ms: float) -> bool:
    """Whether a phase that took ``gpu_ms`` on the GPU and ``host_ms`` to issue was paced
    by the host (``HOST_BOUND``); ``False`` when the host was not measured."""
    return host_ms is not None and gpu_ms > 0 and host_ms >= HOST_BOUND * gpu_ms


def trusted(predicted, measured) -> bool:
    """Whether ``measured``'s step is within ``MAX_TRUSTED_RATIO`` of the prediction."""
    if predicted.step_ms <= 0 or measured.step_ms <= 0:
        return False
    ratio = measured.step_ms / predicted.step_ms
    return 1 / MAX_TRUSTED_RATIO <= ratio <= MAX_TRUSTED_RATIO
