"""Timeline simulator: forward and backward on three lanes (compute, D2H, H2D) and the host.

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
  ``recompute_ms`` of compute right before its first backward use (or that of a recomputation
  reading it: :mod:`.nested`), less ``shared_ms`` when another of its ``group`` was recomputed before it;
- a kept tensor is held to its last backward use;
- the host issues everything in order, from the forward's start: ``Lanes.host_us`` per
  op that takes GPU time (and per recomputation), ``Lanes.op_host_us`` per transfer op
  (a D2H copy and its release, a reload and its wait). Nothing starts on the GPU before
  the host has issued it: where it is behind, each transfer op is step time; where far
  ahead, nothing. Both are 0 (the host never behind) until a measurement corrects them.
  ``Lanes.host_lead_ms`` (the GPU work queued when each phase started, measured) starts
  the host that much ahead of the phase, the backward's only where it is not behind,
  the forward's at most what the step leaves queued at its end (the next one's start).
  With ``Lanes.without_host_scale``, the step is also simulated without the host, and
  ``step_ms`` is the larger of the two, that one scaled (see ``Lanes``).

Memory counts only saved activations, and each only once forward is done with it
(after its last forward use): until then every plan holds it alike, for forward's own
use. That is the *activation peak*, the bytes held for backward. With
``bw_out_bytes``, the output a backward op writes counts too while that op runs: the
gradient of a large activation is as large as it, and a recomputation that only
moves the activation into the time of that op does not lower the peak.

The *step peak* adds every other tensor the step writes: see :mod:`.step_peak`. When
a copy is released and where a reload is issued: :mod:`.copy_lanes`.

With ``Lanes.chained`` (``per_block``), the graph is one call of a chain of identical
calls, each forward followed by the next call's forward and each backward by the
previous call's backward (``docs/design.md``, "Calls in a chain"):

- a release at the end of forward does not wait: the next call completes it, and the
  copy engine starts the next call's forward with what this one left (its D2H spill);
  where the spill grows from one call to the next, the copy engine has more than a
  forward's worth of copies per call and falls behind with every call: the growth is
  counted as a wait of this call;
  the source is freed at the end of this forward as seen from this call, and is held
  at the start of the next one until its first release;
- the reloads issued at the top of backward (``P``) are prefetched by the previous
  call's backward: in this backward's own timeline, ``P`` of the next call is issued
  once this call's own reloads are (and no earlier than needed to end before the end
  of backward with the lead), held from there to the end; this call's ``P`` then lands
  that much before its backward starts (``prefetch_lead_ms``). The reloads do not wait
  for this call's D2H copies: other calls run between a call's forward and backward.

The previous call is this same call: the step is simulated twice, the second time with
the first's spill, carried bytes and prefetch lead.

Chained, ``peak_bytes`` (what a budget bounds and the solver lowers) is what the call
holds between its forward and its backward: in a chain of N calls the step's peak is
N - 1 calls' worth of that, while the last call's backward runs, plus that backward's
own peak, so for the long chains of a model's layers it is what matters. The peak
within the call (its backward, with the next call's prefetched reloads) is kept as
``call_peak_bytes``.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field
from typing import Any

from ..decision import KEEP, OFFLOAD, RECOMPUTE, Decision
from .copy_lanes import (Lanes, copy_ms, earliest_release, next_call_point, release_bounds,
                         releases_now, reload_points)
from .nested import recompute_points
from .step_peak import Transient, levels_of


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
    read_by: tuple[str, ...] = ()  # tensors whose recompute chains read it (:mod:`.nested`)


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
    step_peak_holders: list = field(default_factory=list)
    """(``record``, transients) activation bytes at the step peak, then each other tensor live there."""
    origins: Any = field(default=None, repr=False, compare=False)
    """:attr:`events`' ops and tensors as users name them (``reporting.timeline.Origins``; reports only)."""
    call_peak_bytes: int = 0
    """The peak within the step (``peak_bytes`` but with ``Lanes.chained``)."""
    d2h_spill_ms: float = 0.0
    """How long the D2H copies ran past the end of forward (chained: into the next call)."""
    carried_bytes: int = 0  # chained: bytes of sources whose release the next call completes
    prefetch_lead_ms: float = 0.0
    """Chained: how long before the end of backward the next call's first reloads start."""
    next_call_before: int | None = None  # chained: the backward op they are issued before
    prefetched: tuple[str, ...] = ()  # chained: reloads the previous call prefetched
    bw_pool_bytes: int = 0
    """Bytes Inductor's buffer pool would add to the step peak in a backward with transfer
    ops, which is compiled without it where this is above 0 (``step_peak.step_peak_and_pool``)."""


def simulate(fw_ms: list[float], bw_ms: list[float], tensors: list[SimTensor], lanes: Lanes,
             *, record: bool = False, bw_out_bytes: list[int] | None = None,
             slowed: tuple[list[bool], list[bool]] | None = None,
             transients: list[Transient | tuple[int, int, int]] | None = None,
             previous: SimResult | None = None) -> SimResult:
    """Simulate one training step; see the module docstring for the model.
    ``bw_out_bytes[k]``: bytes backward op ``k`` writes, held while it runs.
    ``slowed``: which forward and which backward ops a running copy slows (``None``:
    all of them). ``transients``: a :class:`Transient` (or ``(nbytes, first_op,
    last_op)``) for every other tensor the step writes, ops numbered over forward then
    backward (backward op ``k`` is ``len(fw_ms) + k``); with them, the result has
    ``step_peak_bytes``. ``previous``: with ``lanes.chained``, the call before this one
    (``None``: simulated first, as this same call).
    The solver calls this thousands of times per graph: per op, only what the op needs."""
    chained = lanes.chained
    if chained and previous is None:
        # Its step is not read: the host-free timeline is left to this call.
        before = dataclasses.replace(lanes, without_host_scale=0.0) if lanes.without_host_scale else lanes
        previous = simulate(fw_ms, bw_ms, tensors, before, bw_out_bytes=bw_out_bytes, slowed=slowed,
                            previous=FIRST_CALL)
    slow = 1.0 + lanes.compute_slowdown
    # Memory changes are made at the compute lane's current time, which never goes back
    # unless an op lasts less than nothing (hand-made inputs only): then they are sorted
    # by time before they are counted.
    in_order = slow >= 0 and min(fw_ms, default=0.0) >= 0 and min(bw_ms, default=0.0) >= 0 and all(
        x.recompute_ms >= 0 and x.recompute_ms - x.shared_ms >= 0 for x in tensors)
    # Every memory change, ``(time, bytes)``, in the order made; ``outs``: which of them
    # are backward outputs (the activation peak counts them, the step peak does not).
    changes: list[tuple[float, int]] = []
    outs: list[int] = []
    events: list[tuple[str, int, str, float, float]] = []
    op_span: list[tuple[float, float]] | None = [] if transients is not None else None

    # After forward op i: tensors forward is done with (held from here), tensors produced.
    n_fw, n_bw = len(fw_ms), len(bw_ms)
    fw_at: dict[int, tuple[list[SimTensor], list[SimTensor]]] = {}
    for x in tensors:
        if x.decision != RECOMPUTE:
            fw_at.setdefault(max(x.produced, x.last_fw_use), ([], []))[0].append(x)
        fw_at.setdefault(x.produced, ([], []))[1].append(x)

    # ---- forward -------------------------------------------------------------
    last_fw = n_fw - 1
    t, stall = 0.0, 0.0
    d2h_free = previous.d2h_spill_ms if chained else 0.0
    carried_in = previous.carried_bytes if chained else 0  # settled by the first release
    carried_out = 0
    if carried_in:
        changes.append((0.0, carried_in))
    copy_end: dict[str, float] = {}
    copy_time: dict[str, float] = {}
    done_at: dict[str, float] = {}  # when the plan counts the copy done: its end plus the lead
    # Offloaded, not yet released, in the order copied; none is released before op
    # ``fixed_at``, unless one due is done at ``due_done`` or op ``due_at`` makes another
    # due (``copy_lanes.release_bounds``), or forward ends.
    pending: list[SimTensor] = []
    fixed_at, due_at, due_done = n_fw, n_fw, float("inf")
    release_after: dict[str, int] = {}
    fw_slowed, bw_slowed = slowed if slowed is not None else (None, None)
    d2h_gbps, lead = lanes.d2h_gbps, lanes.lead
    # The host lane (ms): where the host has issued to. Nothing starts before it is issued.
    (h_fw, h_bw), (o_fw, o_bw) = [(a / 1e3, b / 1e3) for a, b in (lanes.host_us, lanes.op_host_us)]
    hosted, (lead_fw, lead_bw) = bool(h_fw or h_bw or o_fw or o_bw), lanes.host_lead_ms or (0.0, None)
    host = -lead_fw if hosted else 0.0
    for i in range(n_fw):
        ms = fw_ms[i]
        if hosted and ms > 0:
            host += h_fw
            t = max(t, host)
        if d2h_free > t and (fw_slowed is None or fw_slowed[i]):
            ms = ms * slow
        if record and ms > 0:
            events.append(("compute", i, "", t, t + ms))
        if op_span is not None:
            op_span.append((t, t + ms))
        t += ms
        at = fw_at.get(i)
        if at is not None:
            for x in at[0]:
                changes.append((t, x.nbytes))
            for x in at[1]:
                if x.decision == OFFLOAD:
                    host += o_fw
                    start = max(t, d2h_free, host)
                    dur = copy_ms(x.nbytes, d2h_gbps)
                    copy_end[x.name], copy_time[x.name] = start + dur, dur
                    done_at[x.name] = start + dur * (1 + lead)
                    d2h_free = start + dur
                    if record:
                        events.append(("d2h", i, x.name, start, start + dur))
                    pending.append(x)
                    if x.release_after is not None:
                        fixed_at = min(fixed_at, earliest_release(x))
                    else:
                        due_at = min(due_at, x.last_fw_use)
        if not pending:
            continue
        if i >= due_at:  # copies became due: when is the first of them done?
            fixed_at, due_at, due_done = release_bounds(pending, i, done_at, n_fw)
        if i < fixed_at and due_done > t and i != last_fw:
            continue
        ready = [p for p in pending if releases_now(p, i, t, done_at[p.name], n_fw)]
        for x in ready:
            release_after[x.name] = i
            host += o_fw
            t = max(t, host)
            if chained and i == last_fw:  # left to the next call, which settles it
                carried_out += x.nbytes
                changes.append((t, -x.nbytes))
                continue
            wait = max(0.0, done_at[x.name] - t)
            stall += wait
            t += wait
            changes.append((t, -x.nbytes))
            if carried_in:
                changes.append((t, -carried_in))
                carried_in = 0
        if ready:
            pending = [p for p in pending if p.name not in release_after]
            fixed_at, due_at, due_done = release_bounds(pending, i, done_at, n_fw)
    fw_end = t
    if carried_in:
        changes.append((t, -carried_in))
    hidden = {name: max(0.0, min(copy_end[name], fw_end) - (copy_end[name] - copy_time[name]))
              for name in copy_end}

    # ---- backward: plan reload issue points (as late as possible) -------------
    offloaded = sorted((x for x in tensors if x.decision == OFFLOAD),
                       key=lambda x: (x.first_bw_use, x.name))
    # When each backward op starts, were nothing to wait for (``bw_start[-1]``: the end).
    bw_start = list(itertools.accumulate(bw_ms, initial=fw_end)) if offloaded else [fw_end]
    reload_before = reload_points(offloaded, bw_start, lanes)
    # Before backward op k: reloads issued, then first uses; after it: last uses.
    bw_at: dict[int, tuple[list[SimTensor], list[SimTensor], list[SimTensor]]] = {}
    for x in offloaded:
        bw_at.setdefault(reload_before[x.name], ([], [], []))[0].append(x)
    points = recompute_points(tensors)  # nested recomputations are made where their readers are
    for x in tensors:
        if x.decision != KEEP:
            bw_at.setdefault(points.get(x.name, x.first_bw_use), ([], [], []))[1].append(x)
        bw_at.setdefault(x.last_bw_use, ([], [], []))[2].append(x)

    first = [x for x in offloaded if reload_before[x.name] == 0] if chained and n_bw else []
    first_names = {x.name for x in first}
    next_call = next_call_point(first, offloaded, reload_before, bw_start, lanes)
    lead_ms = previous.prefetch_lead_ms if chained else 0.0
    prefetch_start = 0.0

    # ---- backward: run ---------------------------------------------------------
    bw_order = len(changes)  # memory changes from here on are backward's
    if hosted and lead_bw is not None:  # the host starts the backward ``lead_bw`` ahead, if not behind
        host = max(host, t - lead_bw)
    # A reload never starts before the copy out ended (chained: other calls ran between).
    h2d_free = t if chained else max(t, d2h_free)
    landed = fw_end - lead_ms  # chained: where the previous call's prefetch of ``first`` stands
    reload_end: dict[str, float] = {}
    groups_done: set[str] = set()
    h2d_gbps = lanes.h2d_gbps
    for k in range(n_bw):
        at = bw_at.get(k)
        if at is not None:
            for x in at[0]:
                dur = copy_ms(x.nbytes, h2d_gbps)
                if x.name in first_names:  # issued by the previous call's backward
                    landed += dur
                    reload_end[x.name] = landed
                    h2d_free = max(h2d_free, landed)
                    changes.append((t, x.nbytes))
                    continue
                host += o_bw
                start = max(t, h2d_free, host) if chained else max(t, h2d_free, copy_end[x.name], host)
                reload_end[x.name] = start + dur
                h2d_free = start + dur
                changes.append((t, x.nbytes))
                if record:
                    events.append(("h2d", n_fw + k, x.name, start, start + dur))
        if k == next_call:  # the next call's first reloads, after this call's own
            host += o_bw * len(first)
            prefetch_start = max(t, h2d_free, host)
            h2d_free = prefetch_start + sum(copy_ms(x.nbytes, h2d_gbps) for x in first)
            changes.append((t, sum(x.nbytes for x in first)))
            if record:
                events.append(("h2d", n_fw + k, f"next call: {len(first)} reloads", prefetch_start, h2d_free))
        if at is not None:
            for x in at[1]:
                host += o_bw if x.decision == OFFLOAD else h_bw
                t = max(t, host)
                if x.decision == OFFLOAD:
                    wait = max(0.0, reload_end[x.name] - t)
                    stall += wait
                    t += wait
                else:  # recomputed
                    ms = x.recompute_ms
                    if x.group:
                        ms -= x.shared_ms if x.group in groups_done else 0.0
                        groups_done.add(x.group)
                    if record and ms > 0:
                        events.append(("compute", n_fw + k, x.name, t, t + ms))
                    t += ms
                    changes.append((t, x.nbytes))
        ms = bw_ms[k]
        if hosted and ms > 0:
            host += h_bw
            t = max(t, host)
        if h2d_free > t and (bw_slowed is None or bw_slowed[k]):
            ms = ms * slow
        if record and ms > 0:
            events.append(("compute", n_fw + k, "", t, t + ms))
        out = bw_out_bytes[k] if bw_out_bytes else 0
        if out:
            outs.append(len(changes))
            changes.append((t, out))
        if op_span is not None:
            op_span.append((t, t + ms))
        t += ms
        if out:
            outs.append(len(changes))
            changes.append((t, -out))
        if at is not None:
            for x in at[2]:
                changes.append((t, -x.nbytes))

    if next_call is not None:
        changes.append((t, -sum(x.nbytes for x in first)))

    # ---- memory ---------------------------------------------------------------
    holders: list | None = [] if record else None  # only a recorded timeline names them
    peak, peak_t, end_fw, between, curve, step_peak, step_peak_t, pool_cost = levels_of(
        changes, outs, bw_order, fw_end, in_order=in_order, record=record, op_span=op_span,
        transients=transients, pools=(True, None if offloaded else True), n_fw=n_fw, holders=holders)
    call_peak = peak
    spill = max(0.0, d2h_free - fw_end)
    if chained:  # what a call holds while the other calls run (module docstring)
        peak, peak_t, end_fw = between, fw_end, between
        # A copy engine given more than a forward's worth of copies per call falls
        # further behind with every call: some call waits for the excess.
        behind = max(0.0, spill - previous.d2h_spill_ms) if previous is not FIRST_CALL else 0.0
        stall, t = stall + behind, t + behind
    if hosted and lanes.bound_lead and not chained and t - host < lead_fw:
        # A forward starts with the work the step before left queued, and this step leaves
        # less: in steady state that is its head start.
        bounded = dataclasses.replace(lanes, host_lead_ms=(max(0.0, t - host), lead_bw), bound_lead=False)
        return simulate(fw_ms, bw_ms, tensors, bounded, record=record, bw_out_bytes=bw_out_bytes,
                        slowed=slowed, transients=transients, previous=previous)
    step = t
    if hosted and lanes.without_host_scale:  # the GPU's own step, against nothing moved's
        own = simulate(fw_ms, bw_ms, tensors, dataclasses.replace(
            lanes, host_us=(0.0, 0.0), op_host_us=(0.0, 0.0), without_host_scale=0.0),
            bw_out_bytes=bw_out_bytes, slowed=slowed)
        step = max(t, own.step_ms * lanes.without_host_scale)
    return SimResult(
        step_ms=step, fw_ms=fw_end, bw_ms=t - fw_end, stall_ms=stall, peak_bytes=peak,
        peak_time_ms=peak_t, end_of_forward_bytes=end_fw, call_peak_bytes=call_peak, release_after=release_after,
        reload_before=reload_before, copy_ms=copy_time, hidden_ms=hidden, events=events,
        memory=curve, step_peak_bytes=step_peak, step_peak_time_ms=step_peak_t, step_peak_holders=holders or [],
        d2h_spill_ms=spill, carried_bytes=carried_out, next_call_before=next_call, bw_pool_bytes=pool_cost,
        prefetch_lead_ms=t - prefetch_start if next_call is not None else 0.0, prefetched=tuple(x.name for x in first))


#: The call before the first one simulated in a chain: nothing spilled or carried, its
#: prefetch of the first reloads long done.
FIRST_CALL = SimResult(step_ms=0.0, fw_ms=0.0, bw_ms=0.0, stall_ms=0.0, peak_bytes=0,
                       peak_time_ms=0.0, end_of_forward_bytes=0, prefetch_lead_ms=float("inf"))
