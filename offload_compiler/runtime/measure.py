"""Measuring one call of a compiled graph: what the planner predicted, as it ran.

A :class:`Recorder` follows one forward and its backward on the GPU:

- time: CUDA events on the compute stream at the start and end of the forward and of
  the backward (``probe``); events around every wait of the compute stream for a copy
  (the stalls) and around every copy on the copy streams (their time and bandwidth).
  The transfer ops call :func:`copy_started` / :func:`copy_done` / :func:`stall_before`
  / :func:`stall_after` only while a recorder is :data:`active`, which is only inside
  the measured graph's own forward and backward;
- host: how long the host took to issue the forward and the backward (``perf_counter``
  at the same probes, no synchronisation), and the part of it in the transfer ops'
  bodies (:func:`host_timed`), each less the host time of the measurement's own events
  (made before the call, :meth:`CudaRecorder.reserve`);
- kernels (``"kernels"``, a call measured only where a timed call's phase was paced by
  the host): the GPU is held (``torch.cuda._sleep``) for ``hold_ms`` before each phase
  starts, so the host issues the phase whole before the GPU begins it, and the phase's
  time is its kernels' and copies', not the host's pace. Whether the host was ahead is
  checked, not assumed: when the host has issued the phase, the GPU must not have begun
  it yet (the start event not reached: :attr:`CudaRecorder.ahead`);
- queued: the earlier work the GPU still had when each phase started (an event on an
  idle stream just before the phase's start event on the compute stream; the time
  between the two), the host's head start on the phase;
- memory: the CUDA caching allocator's own records (``torch.cuda.memory.
  _record_memory_history``) from the start of the forward to the end of the backward,
  replayed into the step peak above what was held before the forward (the same measure
  as ``step_peak_bytes``, in the allocator's blocks as ``max_memory_allocated`` counts
  them: ``blocks``), its phase, and the allocations live at the peak with the source
  line that made them. Nothing resets the allocator's peak statistics, so a
  user's own ``max_memory_allocated`` readings stay right.

:data:`source` makes recorders; tests replace it (``set_source``) to inject
measurements on a machine without a GPU.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import torch

from ..nbytes import nbytes_text
from . import history

log = logging.getLogger(__name__)

PHASES = ("fw_start", "fw_end", "bw_start", "bw_end")


@dataclass
class Measured:
    """One call of one compiled graph, measured (times in ms, sizes in bytes)."""

    call: int
    """Which call of the compiled graph was measured (1 is the first)."""
    fw_ms: float
    bw_ms: float
    stall_ms: float
    """Time the compute stream waited for copies, forward and backward."""
    fw_stall_ms: float = 0.0
    """The part of ``stall_ms`` in the forward (releases waiting for their copies)."""
    d2h_ms: float = 0.0
    h2d_ms: float = 0.0
    d2h_bytes: int = 0
    h2d_bytes: int = 0
    held_before_bytes: int | None = None
    """Bytes allocated on the device when the forward started (parameters, optimizer
    state, inputs, anything else alive)."""
    step_peak_bytes: int | None = None
    """The peak from the forward's start to the backward's end, above ``held_before_bytes``
    (the graph's own forward and backward: memory other graphs take between them is not
    counted)."""
    peak_phase: str | None = None
    """``"forward"`` or ``"backward"``: where that peak fell."""
    holders: list[str] = field(default_factory=list)
    """The largest allocations live at the peak: size, source line, code."""
    host_fw_ms: float | None = None
    """Host time to issue the forward (its Python, kernel launches and transfer ops; the
    GPU may still be running it): where it is near ``fw_ms`` the host, not the GPU, sets
    the pace. ``None``: not measured."""
    host_bw_ms: float | None = None
    """The same for the backward."""
    host_transfer_ms: tuple[float, float] = (0.0, 0.0)
    """Host time in the transfer ops' bodies, forward and backward (part of the above)."""
    transfer_ops: tuple[int, int] = (0, 0)
    """Transfer ops called, forward and backward."""
    queued_ms: tuple[float | None, float | None] = (None, None)
    """GPU work queued ahead of the forward and of the backward when the host reached
    them (ms; ``None``: not measured): the host's head start on each phase."""
    allocations: tuple[int, int] | None = None
    """Device allocations made in the forward and the backward (each costs the host)."""
    timed_ms: tuple[float, ...] = ()
    """The step of each call timed for this measurement, in order; this one is the median
    call (:func:`typical`, of ``replanning.TIMED_CALLS``; fewer where a later timing
    measured nothing).
    Empty until ``MeasuredGraph`` has read them all."""
    ahead_compute_ms: tuple[float | None, float | None] = (None, None)
    """Each phase's compute (its time less its stalls) measured with the host ahead of the
    GPU (a ``"kernels"`` call, see the module docstring): what its kernels take where the
    timed calls only show the host's pace. ``None``: not measured (no phase was paced), or
    the host did not get ahead (its hold was too short)."""
    events: list[dict[str, Any]] = field(default_factory=list)
    """The measured schedule: the forward and backward on the compute lane, each stall
    and each copy on its lane (``{"lane", "name", "start_ms", "dur_ms", "args"}``, from
    the forward's start; the time between the forward's end and the backward's start,
    other work, is left out, as in the simulated step)."""

    @property
    def step_ms(self) -> float:
        return self.fw_ms + self.bw_ms

    @property
    def fw_compute_ms(self) -> float:
        """The forward less the time it waited for copies."""
        return self.fw_ms - self.fw_stall_ms

    @property
    def bw_compute_ms(self) -> float:
        """The backward less the time it waited for copies."""
        return self.bw_ms - (self.stall_ms - self.fw_stall_ms)

    @property
    def d2h_gbps(self) -> float | None:
        return self.d2h_bytes / self.d2h_ms / 1e6 if self.d2h_ms > 0 else None

    @property
    def h2d_gbps(self) -> float | None:
        return self.h2d_bytes / self.h2d_ms / 1e6 if self.h2d_ms > 0 else None

    @property
    def timed_as(self) -> str:
        """Which of the ``timed_ms`` calls :func:`typical` took this one as, in a word."""
        return "median" if len(self.timed_ms) > 2 else "fastest"

    def as_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "step_ms": self.step_ms}


def typical(timings: list[Measured]) -> Measured:
    """The call of ``timings`` (one plan's timed calls) that stands for its steps: the
    median by step time, or of two the faster (a call slowed by other work is the one
    to leave out). One call, whole, so its parts (compute, stalls, host) still add up."""
    return sorted(timings, key=lambda m: m.step_ms)[(len(timings) - 1) // 2]


class Recorder(Protocol):
    def probe(self, phase: str) -> None: ...
    def complete(self) -> bool:
        """Every phase was probed (the backward of the measured call has run)."""
    def abort(self) -> None: ...
    def result(self) -> Measured | None: ...


class Source(Protocol):
    def recorder(self, device: torch.device, call: int, what: str, intervals: int = 0, *,
                 hold_ms: tuple[float, float] = (0.0, 0.0)) -> Recorder | None:
        """A recorder for ``call`` of a graph on ``device``, measuring ``what``:
        ``"memory"`` (the allocator's records; its Python stacks slow the host, so time is
        measured in another call), ``"time"``, ``"beside"`` (time, of nothing moved run in the
        plan's place) or ``"kernels"`` (time, the GPU held for ``hold_ms`` before the forward and
        the backward; 0: not held); ``None``: cannot. ``intervals``: copies and waits it times."""

    def measures(self, device: torch.device) -> bool:
        """Whether graphs on ``device`` will be measured (known before they compile)."""


#: The recorder of the graph whose forward or backward is running, if it is measured.
active: "CudaRecorder | None" = None


class CudaRecorder:
    """Measures one call on a CUDA device (see the module docstring)."""

    def __init__(self, device: torch.device, call: int, what: str, intervals: int = 0, *,
                 hold_ms: tuple[float, float] = (0.0, 0.0)) -> None:
        self.device = device
        self.call = call
        self.what = what
        self.hold_cycles = tuple(round(ms * _cycles_per_ms(device)) if ms > 0 else 0 for ms in hold_ms)
        self.ahead: list[bool | None] = [None, None]
        """Per phase held: whether the GPU had not begun it when the host had issued it whole."""
        self.phase = ""
        self.events: dict[str, torch.cuda.Event] = {}
        self.idle: dict[str, torch.cuda.Event] = {}  # recorded on an idle stream at each start
        self.counts: dict[str, tuple[int, int]] = {}
        self.allocated: dict[str, int] = {}
        self.copies: list[tuple[str, str, int, torch.cuda.Event, torch.cuda.Event]] = []
        self.stalls: list[tuple[str, torch.cuda.Event, torch.cuda.Event]] = []
        self.history = False
        self.start = 0
        """Where this call's records begin in the allocator's history (another graph's
        call may have begun recording)."""
        self.segments: list[dict[str, Any]] | None = None
        """The allocator's segments when this call's forward started (``blocks``)."""
        self.trace: list[dict[str, Any]] | None = None
        """The allocator's records of the call (memory), read when its backward ended."""
        self.host: dict[str, float] = {}  # perf_counter at each phase
        self.op_s, self.own_s, self.op_calls = [0.0, 0.0], [0.0, 0.0], [0, 0]
        self.spare: list[torch.cuda.Event] = []
        if what != "memory" and intervals:
            self.reserve(2 * intervals)  # a start and an end each
        if what == "time":
            _idle_stream(device)  # made now, outside the measured call

    @property
    def side(self) -> int:
        """0 in the forward, 1 in the backward (from the last phase probed)."""
        return int(self.phase.startswith("bw"))

    def reserve(self, n: int) -> None:
        """Make ``n`` timing events now, outside the measured call (created there, each
        costs the host a few microseconds that the measured call would count)."""
        stream = torch.cuda.current_stream(self.device)
        for _ in range(n):
            event = torch.cuda.Event(enable_timing=True)
            event.record(stream)  # creates the CUDA event
            self.spare.append(event)

    def mark(self, stream: torch.cuda.Stream) -> torch.cuda.Event:
        """A timing event recorded on ``stream`` now (a spare one if any is left); its
        host time is the measurement's own, not the op's."""
        start = time.perf_counter()
        event = self.spare.pop() if self.spare else torch.cuda.Event(enable_timing=True)
        event.record(stream)
        self.own_s[self.side] += time.perf_counter() - start
        return event

    def probe(self, phase: str) -> None:
        global active
        side = int(phase.startswith("bw"))
        if phase.endswith("_end"):
            self.host[phase] = time.perf_counter()
            if self.hold_cycles[side]:  # the GPU not yet at the phase's start: the host was ahead
                self.ahead[side] = not self.events[phase.replace("_end", "_start")].query()
        stats = torch.cuda.memory_stats(self.device)
        counts = (stats.get("allocation.all.allocated", 0), stats.get("allocation.all.freed", 0))
        if phase == "fw_start" and self.what == "memory":
            self.history = history.join(self)
        if phase == "bw_end" and self.history:
            # Read the records and leave the recording now: left on (as they were until the
            # measurement was read, after the timed call), the allocator's Python stacks
            # slow the host in the calls after this one, the timed call among them.
            self.trace = history.trace(self)
            self._stop_history()
        self.phase = phase
        self.counts[phase] = counts
        self.allocated[phase] = stats.get("allocated_bytes.all.current", 0)
        stream = torch.cuda.current_stream(self.device)
        if phase.endswith("_start") and self.hold_cycles[side]:
            with torch.cuda.stream(stream):
                torch.cuda._sleep(self.hold_cycles[side])
        if phase.endswith("_start") and self.what == "time":
            self.idle[phase] = torch.cuda.Event(enable_timing=True)
            self.idle[phase].record(_idle_stream(self.device))
        self.events[phase] = event = torch.cuda.Event(enable_timing=True)
        event.record(stream)
        active = self if phase in ("fw_start", "bw_start") and self.what != "memory" else None
        if phase.endswith("_start"):
            self.host[phase] = time.perf_counter()

    def _events(self, out: Measured) -> list[dict[str, Any]]:
        """The measured schedule (``Measured.events``), when time was measured."""
        if self.what == "memory":
            return []
        origin = self.events["fw_start"]
        gap = self.events["fw_end"].elapsed_time(self.events["bw_start"])

        def at(event: torch.cuda.Event, phase: str) -> float:
            return origin.elapsed_time(event) - (gap if phase == "bw_start" else 0.0)

        events = [{"lane": "compute", "name": "forward", "start_ms": 0.0, "dur_ms": out.fw_ms, "args": {}},
                  {"lane": "compute", "name": "backward", "start_ms": out.fw_ms, "dur_ms": out.bw_ms,
                   "args": {}}]
        for phase, before, after in self.stalls:
            events.append({"lane": "compute", "name": "stall (waits for a copy)",
                           "start_ms": at(before, phase), "dur_ms": before.elapsed_time(after), "args": {}})
        for phase, direction, nbytes, start, end in self.copies:
            events.append({"lane": direction, "name": f"{direction} {nbytes_text(nbytes)}",
                           "start_ms": at(start, phase), "dur_ms": start.elapsed_time(end),
                           "args": {"nbytes": nbytes}})
        return events

    def complete(self) -> bool:
        return set(self.events) == set(PHASES)

    def abort(self) -> None:
        """The call will not be measured (its backward did not run): stop recording."""
        global active
        if active is self:
            active = None
        self._stop_history()

    def _stop_history(self) -> None:
        if self.history:
            self.history = False
            history.leave(self)

    def result(self) -> Measured | None:
        if set(self.events) != set(PHASES):
            return None
        self.events["bw_end"].synchronize()
        ms = {k: v for k, v in zip(("fw", "bw"), (
            self.events["fw_start"].elapsed_time(self.events["fw_end"]),
            self.events["bw_start"].elapsed_time(self.events["bw_end"])))}
        out = Measured(call=self.call, fw_ms=ms["fw"], bw_ms=ms["bw"],
                       stall_ms=sum(a.elapsed_time(b) for _, a, b in self.stalls),
                       fw_stall_ms=sum(a.elapsed_time(b) for p, a, b in self.stalls if p == "fw_start"),
                       held_before_bytes=self.allocated["fw_start"])
        for _, direction, nbytes, start, end in self.copies:
            took = start.elapsed_time(end)
            if direction == "d2h":
                out.d2h_ms, out.d2h_bytes = out.d2h_ms + took, out.d2h_bytes + nbytes
            else:
                out.h2d_ms, out.h2d_bytes = out.h2d_ms + took, out.h2d_bytes + nbytes
        out.events = self._events(out)
        out.ahead_compute_ms = tuple(ms if ahead else None for ms, ahead in
                                     zip((out.fw_compute_ms, out.bw_compute_ms), self.ahead))
        if self.what != "memory":
            ms = [(self.host[f"{p}_end"] - self.host[f"{p}_start"] - own) * 1e3
                  for p, own in zip(("fw", "bw"), self.own_s)]
            out.host_fw_ms, out.host_bw_ms = ms
            out.host_transfer_ms = tuple((op - own) * 1e3 for op, own in zip(self.op_s, self.own_s))
            out.transfer_ops = tuple(self.op_calls)
        out.allocations = tuple(self.counts[f"{p}_end"][0] - self.counts[f"{p}_start"][0] for p in ("fw", "bw"))
        if len(self.idle) == 2:
            out.queued_ms = tuple(max(0.0, self.idle[p].elapsed_time(self.events[p])) for p in ("fw_start", "bw_start"))
        if self.trace is not None:
            history.replay(self, out)
        return out


# Called by the transfer ops while a recorder is active ----------------------------------

def host_timed(kernel: Callable[..., Any]) -> Callable[..., Any]:
    """``kernel`` (a transfer op's body), its host time counted by the active recorder."""
    @functools.wraps(kernel)
    def timed(*args: Any) -> Any:
        rec = active
        if rec is None:
            return kernel(*args)
        start = time.perf_counter()
        try:
            return kernel(*args)
        finally:
            rec.op_s[rec.side] += time.perf_counter() - start
            rec.op_calls[rec.side] += 1
    return timed


def copy_started(stream: torch.cuda.Stream) -> torch.cuda.Event | None:
    rec = active
    return rec.mark(stream) if rec is not None else None


def copy_done(stream: torch.cuda.Stream, start: torch.cuda.Event, direction: str, nbytes: int) -> None:
    rec = active
    if rec is not None:
        rec.copies.append((rec.phase, direction, nbytes, start, rec.mark(stream)))


def stall_before(stream: torch.cuda.Stream) -> torch.cuda.Event | None:
    return copy_started(stream)


def stall_after(stream: torch.cuda.Stream, before: torch.cuda.Event) -> None:
    rec = active
    if rec is not None:
        rec.stalls.append((rec.phase, before, rec.mark(stream)))


@functools.cache
def _idle_stream(device: torch.device) -> torch.cuda.Stream:
    """A stream nothing else runs on (high priority: not in the pool the compute and copy
    streams share hardware queues from): its events complete as soon as the GPU sees them."""
    return torch.cuda.Stream(device, priority=-1)


@functools.cache
def _cycles_per_ms(device: torch.device) -> float:
    """GPU clock cycles ``torch.cuda._sleep`` spins per millisecond on ``device`` (timed once)."""
    cycles = 1 << 22  # about 2 ms at 2 GHz
    stream = torch.cuda.current_stream(device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(stream):
        for _ in range(2):  # the first may wait for the clock to rise
            start.record(stream)
            torch.cuda._sleep(cycles)
            end.record(stream)
            end.synchronize()
    return cycles / max(start.elapsed_time(end), 1e-3)


class CudaSource:
    """Measures on CUDA devices, outside CUDA graph capture; elsewhere nothing."""

    def recorder(self, device: torch.device, call: int, what: str, intervals: int = 0, *,
                 hold_ms: tuple[float, float] = (0.0, 0.0)) -> Recorder | None:
        if device.type != "cuda" or not torch.cuda.is_available():
            return None
        if torch.cuda.is_current_stream_capturing():
            return None
        return CudaRecorder(device, call, "time" if what == "beside" else what, intervals, hold_ms=hold_ms)

    def measures(self, device: torch.device) -> bool:
        return device.type == "cuda" and torch.cuda.is_available()


source: Source = CudaSource()


def set_source(new: Source | None) -> Source:
    """Replace the source of recorders (``None``: the CUDA one); returns the previous."""
    global source
    previous, source = source, (new if new is not None else CudaSource())
    return previous
