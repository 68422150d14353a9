"""The timeline simulator as it was before it was made faster (session 11), chained
calls (``Lanes.chained``) included: the reference the fast one must match field for
field, float for float (``tests/test_planning_cost.py``). Kept verbatim but for its
name and imports (its helpers are its own copies); not used by the package."""

from __future__ import annotations

import bisect

from offload_compiler.decision import OFFLOAD, RECOMPUTE
from offload_compiler.planning.simulator import Lanes, SimResult, SimTensor, Transient, copy_ms
from offload_compiler.planning.step_peak import step_peak_and_pool


def simulate_reference(fw_ms: list[float], bw_ms: list[float], tensors: list[SimTensor],
                       lanes: Lanes, *, record: bool = False, bw_out_bytes: list[int] | None = None,
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
    (``None``: simulated first, as this same call)."""
    chained = lanes.chained
    if chained and previous is None:
        previous = simulate_reference(fw_ms, bw_ms, tensors, lanes, bw_out_bytes=bw_out_bytes,
                                      slowed=slowed, previous=_FIRST_CALL)
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
    t, stall = 0.0, 0.0
    d2h_free = previous.d2h_spill_ms if chained else 0.0
    carried_in = previous.carried_bytes if chained else 0  # settled by the first release
    carried_out = 0
    if carried_in:
        mem(0.0, carried_in)
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
                release_after[x.name] = i
                if chained and i == n_fw - 1:  # left to the next call, which settles it
                    carried_out += x.nbytes
                    mem(t, -x.nbytes)
                    continue
                wait = max(0.0, done_at[x.name] - t)
                stall += wait
                t += wait
                mem(t, -x.nbytes)
                if carried_in:
                    mem(t, -carried_in)
                    carried_in = 0
            if ready:
                pending = [p for p in pending if p.name not in release_after]
                check_at = min((_earliest_release(p) for p in pending), default=n_fw)
    fw_end = t
    if carried_in:
        mem(t, -carried_in)
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

    first = [x for x in offloaded if reload_before[x.name] == 0] if chained and n_bw else []
    first_names = {x.name for x in first}
    next_call = _next_call_point(first, offloaded, reload_before, bw_start, lanes)
    lead_ms = previous.prefetch_lead_ms if chained else 0.0
    prefetch_start = 0.0

    # ---- backward: run ---------------------------------------------------------
    bw_order = order  # memory changes from here on are backward's
    # A reload never starts before the copy out ended (chained: other calls ran between).
    h2d_free = t if chained else max(t, d2h_free)
    landed = fw_end - lead_ms  # chained: where the previous call's prefetch of ``first`` stands
    reload_end: dict[str, float] = {}
    groups_done: set[str] = set()
    for k in range(n_bw):
        for x in issue_at.get(k, ()):
            dur = copy_ms(x.nbytes, lanes.h2d_gbps)
            if x.name in first_names:  # issued by the previous call's backward
                landed += dur
                reload_end[x.name] = landed
                h2d_free = max(h2d_free, landed)
                mem(t, x.nbytes)
                continue
            start = max(t, h2d_free) if chained else max(t, h2d_free, copy_end[x.name])
            reload_end[x.name] = start + dur
            h2d_free = start + dur
            mem(t, x.nbytes)
            if record:
                events.append(("h2d", n_fw + k, x.name, start, start + dur))
        if k == next_call:  # the next call's first reloads, after this call's own
            prefetch_start = max(t, h2d_free)
            h2d_free = prefetch_start + sum(copy_ms(x.nbytes, lanes.h2d_gbps) for x in first)
            mem(t, sum(x.nbytes for x in first))
            if record:
                events.append(("h2d", n_fw + k, f"next call: {len(first)} reloads", prefetch_start, h2d_free))
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

    if next_call is not None:
        mem(t, -sum(x.nbytes for x in first))

    # ---- memory ---------------------------------------------------------------
    held, peak, peak_t, end_fw, between = 0, 0, 0.0, 0, 0
    curve = []
    for time_ms, k, delta in sorted(mem_deltas + out_deltas):
        held += delta
        if time_ms <= fw_end:
            end_fw = held
        if k < bw_order:
            between = held
        if held > peak:
            peak, peak_t = held, time_ms
        if record:
            curve.append((time_ms, held))
    step_peak, step_peak_t, pool_cost, holders = (0, 0.0, 0, [])
    if transients is not None:
        # A plan that offloads keeps Inductor's buffer pool in its backward where it adds nothing.
        step_peak, step_peak_t, pool_cost = step_peak_and_pool(
            mem_deltas, transients, op_span, n_fw, (True, None if offloaded else True), holders if record else None)
    call_peak = peak
    spill = max(0.0, d2h_free - fw_end)
    if chained:  # what a call holds while the other calls run (module docstring)
        peak, peak_t, end_fw = between, fw_end, between
        # A copy engine given more than a forward's worth of copies per call falls
        # further behind with every call: some call waits for the excess.
        behind = max(0.0, spill - previous.d2h_spill_ms) if previous is not _FIRST_CALL else 0.0
        stall, t = stall + behind, t + behind
    return SimResult(
        step_ms=t, fw_ms=fw_end, bw_ms=t - fw_end, stall_ms=stall, peak_bytes=peak,
        peak_time_ms=peak_t, end_of_forward_bytes=end_fw, call_peak_bytes=call_peak, release_after=release_after,
        reload_before=reload_before, copy_ms=copy_time, hidden_ms=hidden, events=events,
        memory=curve, step_peak_bytes=step_peak, step_peak_time_ms=step_peak_t, step_peak_holders=holders,
        d2h_spill_ms=spill, carried_bytes=carried_out, bw_pool_bytes=pool_cost,
        prefetch_lead_ms=t - prefetch_start if next_call is not None else 0.0,
        next_call_before=next_call, prefetched=tuple(x.name for x in first),
    )


#: The call before the first one simulated in a chain: nothing spilled or carried, its
#: prefetch of the first reloads long done.
_FIRST_CALL = SimResult(step_ms=0.0, fw_ms=0.0, bw_ms=0.0, stall_ms=0.0, peak_bytes=0,
                        peak_time_ms=0.0, end_of_forward_bytes=0, prefetch_lead_ms=float("inf"))


def _next_call_point(first: list[SimTensor], offloaded: list[SimTensor], reload_before: dict[str, int],
                     bw_start: list[float], lanes: Lanes) -> int | None:
    """Chained: the backward op before which the next call's ``first`` reloads are issued:
    after this call's own reloads are, and no earlier than they need to end, with the
    lead, by the end of backward (they are held from there)."""
    if not first:
        return None
    n_bw = len(bw_start) - 1
    names = {x.name for x in first}
    own = max((reload_before[x.name] for x in offloaded if x.name not in names), default=0)
    needed = sum(copy_ms(x.nbytes, lanes.h2d_gbps) for x in first) * (1 + lanes.lead)
    latest = max(0, bisect.bisect_right(bw_start, bw_start[n_bw] - needed, 0, n_bw) - 1)
    return min(max(own, latest), n_bw - 1)


def _earliest_release(x: SimTensor) -> int:
    """The first forward op after which :func:`_releases_now` can hold for ``x``."""
    return max(x.release_after, x.last_fw_use) if x.release_after is not None else x.last_fw_use


def _releases_now(x: SimTensor, i: int, t: float, done_at: float, n_fw: int) -> bool:
    if x.release_after is not None:
        return i >= max(x.release_after, x.last_fw_use)
    if i < x.last_fw_use:
        return False
    return done_at <= t or i == n_fw - 1
