"""The simulator's memory figures: the activation peak and the step peak.

:func:`levels_of` turns the simulator's memory changes into its figures (the activation
peak, what is held at the end of forward, the curve) and, with the transients, the step
peak, which :func:`step_peak_of` works out as follows.

The step peak: activations plus every other tensor the step writes.

The *step peak* adds what the activation peak leaves out: every other tensor the step
writes to memory (``transients``: forward intermediates until their last forward use,
outputs, backward intermediates and the parameter gradients), each held from the
start of the op that writes it to the end of the op that last reads it. That is the
peak a caller measures as ``torch.cuda.max_memory_allocated`` less what was held
before the step. Frees at one instant count before allocations, as Inductor frees a
kernel's dead inputs before the next kernel's outputs are allocated.

Inductor does not free every dead buffer (``codegen/wrapper.py``, ``MemoryPlanningState``):
it keeps it in a pool, keyed by dtype and size, and a later buffer of the same key that
Inductor allocates takes the most recently pooled one, which is held until then. It
does so only where holding it does not raise its own estimate of the graph's peak
(``AllocateLine.should_reuse_buffer``: the buffer's size plus the estimate's largest
value between the two points at most the graph's estimated peak); otherwise the dead
buffer is freed where it died. The step peak replays that pool over each graph
(forward, backward) with the simulator's memory per op as the estimate. That estimate
counts the graph's outputs as held to its end, as Inductor's own does in the backend's
compiles (``reuse_estimate.py``: torch 2.11's cancels them, and refused nearly every
reuse in a training forward). (:class:`Transient`
carries the key and whether a buffer enters or leaves the pool.)

A plan that offloads keeps that pool in its backward only where it costs no memory
(``pools[1]`` ``None``: :func:`step_peak_and_pool` replays the backward with the pool and
without, and keeps it where it raises the step peak by nothing; ``lowering.compile_inner``
compiles the backward as the plan says). Inductor's estimate of a backward with transfer
ops, as the backend compiles it, sizes every buffer and leaves out the host copies of
offloaded tensors (``reuse_estimate.py``), as the replay does; even so the pool holds
dead buffers up to that estimate's peak, and a kernel's workspace, which the estimate never
sees, comes on top: planned for an H100, a Llama layout
(``benchmarks/results/2026-12-08_s51_llama_probe.py``) at an activation budget of 0.125
had a step peak of 2.42 GiB with the pool (four dead 176 MiB MLP buffers through an
attention backward that allocates 128 MiB inside its kernel) and 2.28 without. Until
session 51 every backward with transfer ops went without the pool (session 36 measured HF
Llama's step peak at 2.87 GiB with a pool weighed against Inductor's own estimate, which
counted the host copies as device memory and sized only the inputs, and 2.20 GiB without
the pool in session 37); without it the CUDA caching allocator takes each freed buffer
back for the next one of its size, and the host pays an allocation and a free for each (a
ResNet-50 plan's backward made 856 device allocations without the pool against 424 with
it, session 50). Graphs the eager inner compiler runs have no pool
(``facts.gather(pool=False)``: no transient carries a key).
"""

from __future__ import annotations

import bisect
import itertools
import operator
from typing import NamedTuple


class Transient(NamedTuple):
    """A tensor the step writes besides the activations: held from the start of op
    ``first`` to the end of op ``last`` (ops numbered over forward then backward)."""

    nbytes: int
    first: int
    last: int
    key: str = ""
    """Inductor's reuse key (dtype and size); empty: never pooled, never takes a
    pooled buffer."""
    allocates: bool = False
    """Inductor allocates it at ``first``: it may take a pooled dead buffer of its key
    (not where it is written over an input in place, or where a kernel allocates its
    own output)."""
    pooled: bool = False
    """Inductor frees it after ``last`` into the pool (not a graph output, not an
    input written over in place)."""
    workspace: bool = False
    """Memory op ``first`` allocates for its own use while it runs (not a value)."""
    op: int = -1
    """The op whose value it is, where Inductor writes it earlier than that op's place
    (``liveness.Liveness.early``); -1: op ``first``'s."""


class Holder(NamedTuple):
    """A transient live at the simulated step peak (``SimResult.step_peak_holders``):
    op ``op``'s value (or workspace), written at op ``first``, held to the end of op
    ``until`` (past its last read where Inductor's pool keeps it for a later buffer)."""

    nbytes: int
    op: int
    first: int
    last: int
    until: int
    workspace: bool = False


_TIME, _DELTA = operator.itemgetter(0), operator.itemgetter(1)


def levels_of(changes: list[tuple[float, int]], outs: list[int], bw_order: int, fw_end: float, *,
              in_order: bool, record: bool, op_span: list[tuple[float, float]] | None,
              transients: list | None, pools: tuple[bool, bool | None], n_fw: int,
              holders: list | None = None) -> tuple[int, float, int, int, list, int, float, int]:
    """The simulator's memory figures from its memory ``changes`` (``(time_ms, bytes)``
    in the order made; ``outs``: which are backward outputs; from ``bw_order`` on,
    backward's): ``(peak, peak_time, end_of_forward, between, curve, step_peak,
    step_peak_time, pool_cost)``. ``between`` is what is held after forward's last change;
    the step peak (with ``op_span`` and ``transients``) replays Inductor's buffer pool in
    the graphs ``pools`` (forward, backward) says are compiled with it, ``pool_cost`` what
    the backward's would add (:func:`step_peak_and_pool`; module docstring).
    ``holders``: a list to fill with what is live at the step peak (:func:`step_peak_of`)."""
    times, deltas = list(map(_TIME, changes)), list(map(_DELTA, changes))
    order = None if in_order else sorted(range(len(changes)), key=times.__getitem__)  # stable
    if order is not None:
        times, deltas = [times[j] for j in order], [deltas[j] for j in order]
    levels = list(itertools.accumulate(deltas))  # bytes held after each change
    peak = max(levels, default=0)
    if peak > 0:
        peak_t = times[levels.index(peak)]  # the first time it is reached
    else:
        peak, peak_t = 0, 0.0
    done = bisect.bisect_right(times, fw_end)  # the changes at or before the end of forward
    end_fw = levels[done - 1] if done else 0
    if order is None:
        between = levels[bw_order - 1] if bw_order else 0
    else:  # after the last of forward's changes, in time order
        last = max((p for p, j in enumerate(order) if j < bw_order), default=-1)
        between = levels[last] if last >= 0 else 0
    curve = list(zip(times, levels)) if record else []
    step_peak, step_peak_t, pool_cost = (0, 0.0, 0)
    if op_span is not None:
        skip = set(outs)
        activations = [(time_ms, j, delta) for j, (time_ms, delta) in enumerate(changes) if j not in skip]
        step_peak, step_peak_t, pool_cost = step_peak_and_pool(activations, transients, op_span, n_fw, pools,
                                                               holders)
    return peak, peak_t, end_fw, between, curve, step_peak, step_peak_t, pool_cost


def step_peak_of(mem_deltas, transients, op_span, n_fw, pools: tuple[bool, bool | None] = (True, True),
                 holders: list | None = None, *, estimated_besides: list[int] | None = None) -> tuple[int, float]:
    """Peak and its time of the activation deltas (without the backward outputs while
    their op runs: ``transients`` hold those longer) plus ``transients``: in a graph
    ``pools`` (forward, backward) says is compiled with Inductor's buffer pool, each held
    until the buffer that reuses it is allocated (:func:`held_for_reuse`;
    ``estimated_besides``: bytes per op that Inductor's estimate counts besides the
    activations, none by default); elsewhere each held to its last read. ``holders``
    (the final plan's simulation only: it costs a second pass): filled with the
    activation bytes held at the peak, then a :class:`Holder` per transient live there,
    largest first. ``pools[1]`` ``None``: as :func:`step_peak_and_pool` chooses."""
    return step_peak_and_pool(mem_deltas, transients, op_span, n_fw, pools, holders,
                              estimated_besides=estimated_besides)[:2]


def step_peak_and_pool(mem_deltas, transients, op_span, n_fw, pools: tuple[bool, bool | None] = (True, True),
                       holders: list | None = None, *, estimated_besides: list[int] | None = None,
                       ) -> tuple[int, float, int]:
    """:func:`step_peak_of`'s peak and time, and the bytes backward's pool adds to that
    peak: with ``pools[1]`` ``None``, the backward keeps the pool where it adds nothing
    (module docstring), and otherwise the peak is the one without it; with ``pools[1]``
    given, that pool as asked (0 bytes: not weighed)."""
    last = len(op_span) - 1
    spans = [Transient(*t) for t in transients if t[0] > 0 and 0 <= t[1] <= last]
    spans = [t._replace(last=min(max(t.last, t.first), last)) for t in spans]
    deltas = sorted((time_ms, delta) for time_ms, _, delta in mem_deltas)
    weigh = pools[1] is None
    both = (pools[0], True if weigh else pools[1])
    if not any(both):
        extended = [t.last for t in spans]
    else:
        base = _held_per_op(deltas, op_span)
        if estimated_besides is not None:
            base = [a + b for a, b in zip(base, estimated_besides)]
        extended = held_for_reuse(spans, base, n_fw, both)
    peak, peak_t, at, cost = *_peak_of(deltas, spans, extended, op_span), 0
    if weigh:  # backward's pool takes the buffers that die in backward
        without = [t.last if t.last >= n_fw else until for t, until in zip(spans, extended)]
        if without != extended:
            unpooled = _peak_of(deltas, spans, without, op_span)
            cost = peak - unpooled[0]
            if cost > 0:
                (peak, peak_t, at), extended = unpooled, without
    if holders is not None and at >= 0:
        holders.extend(_live_at(at, mem_deltas, spans, extended, op_span))
    return peak, peak_t, max(cost, 0)


def _with_spans(deltas: list[tuple[float, int]], spans: list[Transient], until: list[int], op_span) -> list:
    """``deltas`` (sorted) with each of ``spans`` held from its first op to op ``until``, sorted
    (at one instant, frees, negative, first)."""
    out = list(deltas)
    for t, end in zip(spans, until):
        out.append((op_span[t.first][0], t.nbytes))
        out.append((op_span[end][1], -t.nbytes))
    out.sort()
    return out


def _peak_of(deltas: list[tuple[float, int]], spans: list[Transient], until: list[int], op_span,
             ) -> tuple[int, float, int]:
    """Peak of ``deltas`` with ``spans`` (:func:`_with_spans`), its time, and the index of the
    change that reaches it (-1: none)."""
    held, peak, peak_t, at = 0, 0, 0.0, -1
    for i, (time_ms, delta) in enumerate(_with_spans(deltas, spans, until, op_span)):
        held += delta
        if held > peak:
            peak, peak_t, at = held, time_ms, i
    return peak, peak_t, at


def _live_at(at: int, mem_deltas, spans: list[Transient], until: list[int], op_span) -> list:
    """What :func:`step_peak_of`'s sorted deltas (:func:`_with_spans`) hold after their ``at``-th: the
    activation bytes, then each transient live, as a :class:`Holder`, largest first.
    Replays that sort with each delta tagged by its source: the same sums (of equal
    deltas at one instant, either may be the one named)."""
    tagged = sorted([(time_ms, delta, -1) for time_ms, _, delta in mem_deltas]
                    + [(op_span[t.first][0], t.nbytes, i) for i, t in enumerate(spans)]
                    + [(op_span[u][1], -t.nbytes, i) for i, (t, u) in enumerate(zip(spans, until))],
                    key=lambda d: (d[0], d[1]))
    activations, live = 0, set()
    for time_ms, delta, source in tagged[:at + 1]:
        if source < 0:
            activations += delta
        elif delta > 0:
            live.add(source)
        else:
            live.discard(source)
    found = [Holder(spans[i].nbytes, spans[i].op if spans[i].op >= 0 else spans[i].first, spans[i].first,
                    spans[i].last, until[i], spans[i].workspace) for i in live]
    return [activations] + sorted(found, key=lambda h: (-h.nbytes, h.first))


def _held_per_op(deltas: list[tuple[float, int]], op_span) -> list[int]:
    """Most bytes ``deltas`` (sorted) hold at any time while each op runs."""
    times = [d[0] for d in deltas]
    levels, held = [], 0
    for _, delta in deltas:
        held += delta
        levels.append(held)
    out = []
    for start, end in op_span:
        i = bisect.bisect_right(times, start)
        j = bisect.bisect_right(times, end)
        at_start = levels[i - 1] if i else 0
        out.append(max([at_start] + levels[i:j]))
    return out


def held_for_reuse(spans: list[Transient], base: list[int], n_fw: int,
                   pools: tuple[bool, bool] = (True, True)) -> list[int]:
    """The op until which each of ``spans`` holds its memory, replaying Inductor's
    reuse pool (module docstring) over forward (ops ``< n_fw``) and backward apart, in
    those ``pools`` says have one: ``last``, or the op before the one whose buffer takes
    it over. ``base``: the bytes per op Inductor's estimate counts besides ``spans`` (the
    activations)."""
    n = len(base)
    est = list(base)
    for t in spans:
        if t.workspace:  # allocated inside a kernel: Inductor's estimate never sees it
            continue
        for op in range(t.first, t.last + 1):
            est[op] += t.nbytes
    until = [t.last for t in spans]
    allocs: dict[int, list[int]] = {}
    frees: dict[int, list[int]] = {}
    for i, t in enumerate(spans):
        if t.key and t.allocates:
            allocs.setdefault(t.first, []).append(i)
        if t.key and t.pooled:
            frees.setdefault(t.last, []).append(i)
    for (lo, hi), pooled in zip(((0, min(n_fw, n)), (min(n_fw, n), n)), pools):
        if lo >= hi or not pooled:
            continue
        peak = max(est[lo:hi])
        pool: dict[str, list[int]] = {}
        for op in range(lo, hi):
            for i in allocs.get(op, ()):
                stack = pool.get(spans[i].key)
                if not stack:
                    continue
                dead = stack[-1]
                gap = range(spans[dead].last + 1, op)
                if gap and spans[i].nbytes + max(est[k] for k in gap) > peak:
                    continue  # Inductor frees the dead buffer instead
                stack.pop()
                until[dead] = op - 1
                for k in gap:
                    est[k] += spans[i].nbytes
            if op < hi - 1:  # a buffer dying in the graph's last op meets no allocation
                for i in frees.get(op, ()):
                    pool.setdefault(spans[i].key, []).append(i)
    return until
