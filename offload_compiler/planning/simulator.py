"""Timeline simulator: forward and backward as three lanes, compute, D2H and H2D.

Pure Python on plain data (no FX, no torch). Times are milliseconds, sizes bytes,
bandwidths GB/s (1e9 bytes per second).

The model:

- compute runs the forward ops, then the backward ops, one after another;
- an offloaded tensor's D2H copy starts when its producer ends and the D2H lane is
  free; its *release* is a compute-stream wait for the copy, placed after the last
  forward use (``release_after``; ``None`` places it at the first op that ends after
  the copy, so it never stalls); its memory is freed there;
- in backward its H2D copy is issued before op ``reload_before`` (``None``: as late as
  the H2D lane allows while still finishing before the first use); compute waits
  for it before the first use; its memory is held from issue to its last use;
- ``Lanes.lead`` adds slack to both: a copy counts as done that fraction of its
  duration after its planned end; a compute op that starts while a copy runs takes
  ``Lanes.compute_slowdown`` longer (only the ops ``slowed`` names, when given);
- a recomputed tensor is not held between its last forward use and backward; it costs
  ``recompute_ms`` of compute right before its first backward use, less ``shared_ms``
  when another tensor of its ``group`` was recomputed before it;
- a kept tensor is held to its last backward use.

Memory counts only saved activations, and each only once forward is done with it
(after its last forward use): until then every plan holds it alike, for forward's own
use. That is the *activation peak*, the bytes held for backward. With
``bw_out_bytes``, the output a backward op writes counts too while that op runs: the
gradient of a large activation is as large as it, and a recomputation that only
moves the activation into the time of that op does not lower the peak.

The *step peak* adds every other tensor the step writes: see :mod:`.step_peak`.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

from ..decision import KEEP, OFFLOAD, RECOMPUTE, Decision
from .step_peak import Transient, step_peak_of


@dataclass(frozen=True)
class SimTensor:
    name: str
    nbytes: int
    produced: int
    """Index of the forward op that produces it."""
    last_fw_use: int
    """Index of the last forward op that reads it (or an alias); ``>= produced``."""
    first_bw_use: int
    """Index of the first backward op that reads it."""
    last_bw_use: int
    """Index of the last backward op that reads it."""
    decision: Decision = KEEP
    recompute_ms: float = 0.0
    release_after: int | None = None
    """Forward op after which it is released (offload only)."""
    reload_before: int | None = None
    """Backward op before which its reload is issued (offload only)."""
    group: str = ""
    """Tensors with the same non-empty ``group`` share part of their recomputation
    (one matmul whose output they all view): it runs once, for the first of them
    recomputed in backward."""
    shared_ms: float = 0.0
    """The part of ``recompute_ms`` that the group shares."""


@dataclass(frozen=True)
class Lanes:
    d2h_gbps: float
    h2d_gbps: float
    lead: float = 0.0
    """Slack per copy, as a fraction of its duration: a reload is planned to end this
    much before its first use, and a release waits until this much after its copy's
    planned end (compute often runs faster than estimated; a copy planned to end just
    in time then stalls it)."""
    compute_slowdown: float = 0.0
    """Compute ops that start while a copy runs take this fraction longer."""


@dataclass
class SimResult:
    step_ms: float
    fw_ms: float
    bw_ms: float
    stall_ms: float
    peak_bytes: int
    peak_time_ms: float
    end_of_forward_bytes: int
    release_after: dict[str, int] = field(default_factory=dict)
    reload_before: dict[str, int] = field(default_factory=dict)
    copy_ms: dict[str, float] = field(default_factory=dict)
    hidden_ms: dict[str, float] = field(default_factory=dict)
    """Per offloaded tensor: compute time that ran while its D2H copy ran."""
    events: list[tuple[str, int, str, float, float]] = field(default_factory=list)
    """``(lane, op, tensor, start_ms, end_ms)``, lanes ``compute``, ``d2h``, ``h2d``. ``op``
    numbers the ops over forward then backward (backward op ``k`` is ``len(fw_ms) + k``):
    on ``compute`` the op that ran (``tensor`` empty) or, for a recomputation, the
    backward op it runs before (``tensor``: the value recomputed); on ``d2h`` the op
    that produced ``tensor``; on ``h2d`` the backward op its reload is issued before.
    Plain data: reports name them (module, source line) through :attr:`origins`."""
    memory: list[tuple[float, int]] = field(default_factory=list)
    """(time_ms, activation bytes held) after every change."""
    step_peak_bytes: int = 0
    """Peak of activations and ``transients`` together (0 without ``transients``)."""
    step_peak_time_ms: float = 0.0
    origins: Any = field(default=None, repr=False, compare=False)
    """What each op and tensor of :attr:`events` is in the user's terms, for reports
    (``reporting.timeline.Origins``); set by the caller that knows the graph
    (``planning.facts.final_simulation``), never read here."""


def copy_ms(nbytes: int, gbps: float) -> float:
    """Milliseconds to copy ``nbytes`` at ``gbps`` GB/s."""
    return nbytes / (gbps * 1e9) * 1e3


def simulate(fw_ms: list[float], bw_ms: list[float], tensors: list[SimTensor], lanes: Lanes,
             *, record: bool = False, bw_out_bytes: list[int] | None = None,
             slowed: tuple[list[bool], list[bool]] | None = None,
             transients: list[Transient | tuple[int, int, int]] | None = None) -> SimResult:
    """Simulate one training step; see the module docstring for the model.
    ``bw_out_bytes[k]``: bytes backward op ``k`` writes, held while it runs.
    ``slowed``: which forward and which backward ops a running copy slows (``None``:
    all of them). ``transients``: a :class:`Transient` (or ``(nbytes, first_op,
    last_op)``) for every other tensor the step writes, ops numbered over forward then
    backward (backward op ``k`` is ``len(fw_ms) + k``); with them, the result has
    ``step_peak_bytes``."""
    mem_deltas: list[tuple[float, int, int]] = []  # (time, order, delta)
    out_deltas: list[tuple[float, int, int]] = []  # bw_out_bytes: activation peak only
    events: list[tuple[str, int, str, float, float]] = []
    op_span: list[tuple[float, float]] = []  # (start, end) of every op, forward then backward
    order = 0

    def mem(t: float, delta: int, into: list | None = None) -> None:
        nonlocal order
        (mem_deltas if into is None else into).append((t, order, delta))
        order += 1

    produced_at: dict[int, list[SimTensor]] = {}
    held_from: dict[int, list[SimTensor]] = {}  # counted once forward is done with it
    for x in tensors:
        produced_at.setdefault(x.produced, []).append(x)
        if x.decision != RECOMPUTE:
            held_from.setdefault(max(x.produced, x.last_fw_use), []).append(x)

    # ---- forward -------------------------------------------------------------
    n_fw = len(fw_ms)
    t, stall, d2h_free = 0.0, 0.0, 0.0
    copy_end: dict[str, float] = {}
    copy_time: dict[str, float] = {}
    done_at: dict[str, float] = {}  # when the plan counts the copy done: its end plus the lead
    pending: list[SimTensor] = []  # offloaded, not yet released
    # No pending copy can be released before op ``check_at`` (the least of their last
    # forward uses, and of their planned release points where the plan fixes them).
    check_at = n_fw
    release_after: dict[str, int] = {}
    op_start: list[float] = []
    slow = 1.0 + lanes.compute_slowdown
    fw_slowed, bw_slowed = slowed if slowed is not None else ([True] * n_fw, [True] * len(bw_ms))
    for i in range(n_fw):
        op_start.append(t)
        ms = fw_ms[i] * (slow if d2h_free > t and fw_slowed[i] else 1.0)
        if record and ms > 0:
            events.append(("compute", i, "", t, t + ms))
        op_span.append((t, t + ms))
        t += ms
        for x in held_from.get(i, ()):
            mem(t, x.nbytes)
        for x in produced_at.get(i, ()):
            if x.decision == OFFLOAD:
                start = max(t, d2h_free)
                dur = copy_ms(x.nbytes, lanes.d2h_gbps)
                copy_end[x.name], copy_time[x.name] = start + dur, dur
                done_at[x.name] = start + dur * (1 + lanes.lead)
                d2h_free = start + dur
                if record:
                    events.append(("d2h", i, x.name, start, start + dur))
                pending.append(x)
                check_at = min(check_at, _earliest_release(x))
        if pending and (i >= check_at or i == n_fw - 1):
            ready = [p for p in pending if _releases_now(p, i, t, done_at[p.name], n_fw)]
            for x in ready:
                wait = max(0.0, done_at[x.name] - t)
                stall += wait
                t += wait
                mem(t, -x.nbytes)
                release_after[x.name] = i
            if ready:
                pending = [p for p in pending if p.name not in release_after]
                check_at = min((_earliest_release(p) for p in pending), default=n_fw)
    fw_end = t
    hidden = {name: max(0.0, min(copy_end[name], fw_end) - (copy_end[name] - copy_time[name]))
              for name in copy_end}

    # ---- backward: plan reload issue points (as late as possible) -------------
    n_bw = len(bw_ms)
    bw_start = [fw_end]
    for k in range(n_bw):
        bw_start.append(bw_start[-1] + bw_ms[k])
    offloaded = sorted((x for x in tensors if x.decision == OFFLOAD),
                       key=lambda x: (x.first_bw_use, x.name))
    reload_before: dict[str, int] = {}
    lane_next = float("inf")
    for x in reversed(offloaded):
        dur = copy_ms(x.nbytes, lanes.h2d_gbps)
        if x.reload_before is not None:
            k = min(x.reload_before, x.first_bw_use)
        else:
            latest_end = min(bw_start[x.first_bw_use] - lanes.lead * dur, lane_next)
            k = max(0, bisect.bisect_right(bw_start, latest_end - dur, 0, x.first_bw_use + 1) - 1)
        reload_before[x.name] = k
        lane_next = bw_start[k]
    issue_at: dict[int, list[SimTensor]] = {}
    for x in offloaded:
        issue_at.setdefault(reload_before[x.name], []).append(x)
    first_use: dict[int, list[SimTensor]] = {}
    last_use: dict[int, list[SimTensor]] = {}
    for x in tensors:
        first_use.setdefault(x.first_bw_use, []).append(x)
        last_use.setdefault(x.last_bw_use, []).append(x)

    # ---- backward: run ---------------------------------------------------------
    h2d_free = max(t, d2h_free)  # a reload never starts before the copy out ended
    reload_end: dict[str, float] = {}
    groups_done: set[str] = set()
    for k in range(n_bw):
        for x in issue_at.get(k, ()):
            start = max(t, h2d_free, copy_end[x.name])
            dur = copy_ms(x.nbytes, lanes.h2d_gbps)
            reload_end[x.name] = start + dur
            h2d_free = start + dur
            mem(t, x.nbytes)
            if record:
                events.append(("h2d", n_fw + k, x.name, start, start + dur))
        for x in first_use.get(k, ()):
            if x.decision == OFFLOAD:
                wait = max(0.0, reload_end[x.name] - t)
                stall += wait
                t += wait
            elif x.decision == RECOMPUTE:
                ms = x.recompute_ms
                if x.group:
                    ms -= x.shared_ms if x.group in groups_done else 0.0
                    groups_done.add(x.group)
                if record and ms > 0:
                    events.append(("compute", n_fw + k, x.name, t, t + ms))
                t += ms
                mem(t, x.nbytes)
        ms = bw_ms[k] * (slow if h2d_free > t and bw_slowed[k] else 1.0)
        if record and ms > 0:
            events.append(("compute", n_fw + k, "", t, t + ms))
        out = bw_out_bytes[k] if bw_out_bytes else 0
        if out:
            mem(t, out, out_deltas)
        op_span.append((t, t + ms))
        t += ms
        if out:
            mem(t, -out, out_deltas)
        for x in last_use.get(k, ()):
            mem(t, -x.nbytes)

    # ---- memory ---------------------------------------------------------------
    held, peak, peak_t, end_fw = 0, 0, 0.0, 0
    curve = []
    for time_ms, _, delta in sorted(mem_deltas + out_deltas):
        held += delta
        if time_ms <= fw_end:
            end_fw = held
        if held > peak:
            peak, peak_t = held, time_ms
        if record:
            curve.append((time_ms, held))
    step_peak, step_peak_t = (0, 0.0)
    if transients is not None:
        # Inductor's own estimate, which guards its buffer reuse, counts graph inputs
        # and outputs on any device: each offloaded tensor's host copy from its copy
        # to the end of forward, and from the start of backward to its reload.
        host = [0] * len(op_span)
        for x in offloaded:
            for op in (*range(x.produced, n_fw), *range(n_fw, n_fw + reload_before[x.name] + 1)):
                host[op] += x.nbytes
        step_peak, step_peak_t = step_peak_of(mem_deltas, transients, op_span, n_fw, host)
    return SimResult(
        step_ms=t, fw_ms=fw_end, bw_ms=t - fw_end, stall_ms=stall, peak_bytes=peak,
        peak_time_ms=peak_t, end_of_forward_bytes=end_fw, release_after=release_after,
        reload_before=reload_before, copy_ms=copy_time, hidden_ms=hidden, events=events,
        memory=curve, step_peak_bytes=step_peak, step_peak_time_ms=step_peak_t,
    )


def _earliest_release(x: SimTensor) -> int:
    """The first forward op after which :func:`_releases_now` can hold for ``x``."""
    return max(x.release_after, x.last_fw_use) if x.release_after is not None else x.last_fw_use


def _releases_now(x: SimTensor, i: int, t: float, done_at: float, n_fw: int) -> bool:
    if x.release_after is not None:
        return i >= max(x.release_after, x.last_fw_use)
    if i < x.last_fw_use:
        return False
    return done_at <= t or i == n_fw - 1
