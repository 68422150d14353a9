"""The copy lanes of the timeline simulator (:mod:`.simulator`): D2H and H2D.

Pure Python on plain data. Times are milliseconds, sizes bytes, bandwidths GB/s (1e9
bytes per second). What the simulator asks of the two copy engines:

- when an offloaded tensor's D2H copy may be *released* (its memory freed): after a
  fixed forward op (``release_after``, where the plan fixes it) or once forward is
  done with it and its copy is done with the lead (:func:`releases_now`); the
  simulator checks only at ops where one can be (:func:`release_bounds`);
- before which backward op each reload is issued: as late as the H2D lane allows
  while still finishing, with the lead, before the first use (:func:`reload_points`);
- with ``Lanes.chained``, before which backward op the next call's first reloads are
  issued (:func:`next_call_point`).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .simulator import SimTensor


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
    chained: bool = False
    """The graph is one call of a chain of identical calls (see :mod:`.simulator`)."""
    host_us: tuple[float, float] = (0.0, 0.0)
    """The host's time to issue one forward / backward op that takes GPU time,
    microseconds (its share of Inductor's Python and launches), measured
    (``replan.Corrections``); ``(0, 0)``: not measured, the host is never behind."""
    op_host_us: tuple[float, float] = (0.0, 0.0)
    """The host's time for one transfer op in the forward (``d2h``, ``release``) and in
    the backward (``h2d``, ``wait``), microseconds, measured."""
    host_lead_ms: tuple[float, float] | None = None
    """The host's head start on the forward and on the backward: GPU work still queued
    when each starts (measured, ``Measured.queued_ms``). The host issues from this much
    before the GPU can begin the phase, so a phase the host issues slower than it runs
    is paced by the host only once that lead is spent. ``None``: not measured (the host
    starts with the forward and issues the backward straight after it)."""
    bound_lead: bool = True
    """Bound the forward's head start by what the simulated step leaves queued at its end
    (simulated again once with that, where less). ``False`` where a measured plan is
    simulated with its own measured head start (fitting, re-predicting it)."""
    without_host_scale: float = 0.0
    """With a host lane (``host_us`` or ``op_host_us``) and this non-zero, a plan's
    ``step_ms`` is the larger of its step with the host and its step without it (the
    GPU's own time) times this: the step with nothing moved with the host over the
    same without it. Its overhead over nothing moved is then the larger of the two
    timelines' (what ``"auto"`` plans with: ``search.py``)."""


def copy_ms(nbytes: int, gbps: float) -> float:
    """Milliseconds to copy ``nbytes`` at ``gbps`` GB/s."""
    return nbytes / (gbps * 1e9) * 1e3


def earliest_release(x: SimTensor) -> int:
    """The first forward op after which :func:`releases_now` can hold for ``x``."""
    return max(x.release_after, x.last_fw_use) if x.release_after is not None else x.last_fw_use


def releases_now(x: SimTensor, i: int, t: float, done_at: float, n_fw: int) -> bool:
    """Whether ``x``'s copy is released after forward op ``i``, at ``t`` (``done_at``:
    when the plan counts its copy done)."""
    if x.release_after is not None:
        return i >= max(x.release_after, x.last_fw_use)
    if i < x.last_fw_use:
        return False
    return done_at <= t or i == n_fw - 1


def release_bounds(pending: list[SimTensor], i: int, done_at: dict[str, float],
                   n_fw: int) -> tuple[int, int, float]:
    """Where, after forward op ``i``, the copies ``pending`` release can next hold:
    ``(fixed_at, due_at, due_done)``. No copy is released before op ``fixed_at`` (the
    least fixed release point), unless one that is due (forward done with it) has its
    copy done, at ``due_done`` ms, or until op ``due_at`` makes another due (and forward's
    last op releases them all)."""
    fixed_at, due_at, due_done = n_fw, n_fw, float("inf")
    for p in pending:
        if p.release_after is not None:
            fixed_at = min(fixed_at, earliest_release(p))
        elif p.last_fw_use <= i:
            due_done = min(due_done, done_at[p.name])
        else:
            due_at = min(due_at, p.last_fw_use)
    return fixed_at, due_at, due_done


def reload_points(offloaded: list[SimTensor], bw_start: list[float], lanes: Lanes) -> dict[str, int]:
    """The backward op before which each reload is issued (``offloaded`` by first
    backward use; ``bw_start[k]``: when backward op ``k`` starts, ``bw_start[-1]`` when
    backward ends): the plan's ``reload_before`` where it fixes one, else as late as
    the H2D lane allows while still finishing, with the lead, before the first use."""
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
    return reload_before


def next_call_point(first: list[SimTensor], offloaded: list[SimTensor], reload_before: dict[str, int],
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
