"""Measuring one call of a compiled graph: what the planner predicted, as it ran.

A :class:`Recorder` follows one forward and its backward on the GPU:

- time: CUDA events on the compute stream at the start and end of the forward and of
  the backward (``probe``); events around every wait of the compute stream for a copy
  (the stalls) and around every copy on the copy streams (their time and bandwidth).
  The transfer ops call :func:`copy_started` / :func:`copy_done` / :func:`stall_before`
  / :func:`stall_after` only while a recorder is :data:`active`, which is only inside
  the measured graph's own forward and backward;
- memory: the CUDA caching allocator's own records (``torch.cuda.memory.
  _record_memory_history``) from the start of the forward to the end of the backward,
  replayed into the step peak above what was held before the forward (the same measure
  as ``step_peak_bytes``), its phase, and the allocations live at the peak with the
  source line that made them. Nothing resets the allocator's peak statistics, so a
  user's own ``max_memory_allocated`` readings stay right.

:data:`source` makes recorders; tests replace it (``set_source``) to inject
measurements on a machine without a GPU.
"""

from __future__ import annotations

import dataclasses
import linecache
import logging
import os
import weakref
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from ..nbytes import nbytes_text

log = logging.getLogger(__name__)

PHASES = ("fw_start", "fw_end", "bw_start", "bw_end")
#: Allocations live at the measured peak that are named (largest first).
HOLDERS = 5
#: Allocator records kept while measuring (one call: a few thousand are typical).
MAX_ENTRIES = 1_000_000


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

    def as_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "step_ms": self.step_ms}


class Recorder(Protocol):
    def probe(self, phase: str) -> None: ...
    def complete(self) -> bool:
        """Every phase was probed (the backward of the measured call has run)."""
    def abort(self) -> None: ...
    def result(self) -> Measured | None: ...


class Source(Protocol):
    def recorder(self, device: torch.device, call: int, what: str) -> Recorder | None:
        """A recorder for ``call`` of a graph on ``device``, measuring ``what``:
        ``"memory"`` (the allocator's records; its Python stacks slow the host, so time is
        measured in another call) or ``"time"``; ``None`` where it cannot measure."""


#: The recorder of the graph whose forward or backward is running, if it is measured.
active: "CudaRecorder | None" = None


class CudaRecorder:
    """Measures one call on a CUDA device (see the module docstring)."""

    def __init__(self, device: torch.device, call: int, what: str) -> None:
        self.device = device
        self.call = call
        self.what = what
        self.phase = ""
        self.events: dict[str, torch.cuda.Event] = {}
        self.counts: dict[str, tuple[int, int]] = {}
        self.allocated: dict[str, int] = {}
        self.copies: list[tuple[str, str, int, torch.cuda.Event, torch.cuda.Event]] = []
        self.stalls: list[tuple[str, torch.cuda.Event, torch.cuda.Event]] = []
        self.history = False
        self.offset = 0
        """Records made before this call's forward started (another graph's call began them)."""
        self.trace: list[dict[str, Any]] | None = None
        """The allocator's records of the call (memory), read when its backward ended."""

    def probe(self, phase: str) -> None:
        global active
        stats = torch.cuda.memory_stats(self.device)
        counts = (stats.get("allocation.all.allocated", 0), stats.get("allocation.all.freed", 0))
        if phase == "fw_start" and self.what == "memory":
            self.history = _join_history(self, counts)
        if phase == "bw_end" and self.history:
            # Read the records and leave the recording now: left on (as they were until the
            # measurement was read, after the timed call), the allocator's Python stacks
            # slow the host in the calls after this one, the timed call among them.
            self.trace = _trace(self.device)[self.offset:]
            self._stop_history()
        self.phase = phase
        self.counts[phase] = counts
        self.allocated[phase] = stats.get("allocated_bytes.all.current", 0)
        event = torch.cuda.Event(enable_timing=True)
        event.record(torch.cuda.current_stream(self.device))
        self.events[phase] = event
        active = self if phase in ("fw_start", "bw_start") and self.what == "time" else None

    def _events(self, out: Measured) -> list[dict[str, Any]]:
        """The measured schedule (``Measured.events``), when time was measured."""
        if self.what != "time":
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
            _leave_history(self)

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
        if self.trace is not None:
            _peak_from_history(self, out)
        return out


#: Per device index: the memory recorders between their forward's start and their
#: backward's end, and the allocation counts when recording began. Graphs split by a
#: graph break are measured in the same step, their calls nested (A's forward, B's
#: forward, B's backward, A's backward): recording runs while any of them needs it, and
#: each reads the records from its own start.
_recording: dict[int, tuple[weakref.WeakSet, tuple[int, int]]] = {}


def _join_history(rec: CudaRecorder, counts: tuple[int, int]) -> bool:
    index = _index(rec.device)
    if index not in _recording:
        if not _start_history(rec.device):
            return False
        _recording[index] = (weakref.WeakSet(), counts)
    users, (a0, f0) = _recording[index]
    users.add(rec)
    rec.offset = (counts[0] - a0) + (counts[1] - f0)
    return True


def _leave_history(rec: CudaRecorder) -> None:
    index = _index(rec.device)
    users, _ = _recording.get(index, (weakref.WeakSet(), None))
    users.discard(rec)
    if not users:
        _recording.pop(index, None)
        torch.cuda.memory._record_memory_history(enabled=None, device=rec.device)


def _index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


def _start_history(device: torch.device) -> bool:
    try:
        torch.cuda.memory._record_memory_history(
            enabled="all", context="alloc", stacks="python", max_entries=MAX_ENTRIES,
            device=device)
        return True
    except Exception as e:  # noqa: BLE001 - an allocator without history: time only
        log.info("offload: cannot record the allocator's history on %s (%s); measuring time only",
                 device, e)
        return False


def _trace(device: torch.device) -> list[dict[str, Any]]:
    """The allocator's recorded allocations and frees on ``device``, oldest first."""
    try:
        snapshot = torch.cuda.memory._snapshot(device, augment_with_fx_traces=True)
    except TypeError:  # torch without FX-augmented snapshots
        snapshot = torch.cuda.memory._snapshot(device)
    trace = snapshot["device_traces"][_index(device)]
    return [e for e in trace if e["action"] in ("alloc", "free_requested")]


def _peak_from_history(rec: CudaRecorder, out: Measured) -> None:
    """Replay the allocator's records of the measured call: the peak above what was held
    at the forward's start, counted over the graph's own forward and backward (the
    memory taken between them, by other graphs, is carried, not counted as a peak), and
    what was live at it."""
    trace = rec.trace or []
    a0, f0 = rec.counts["fw_start"]

    def position(phase: str) -> int:
        a, f = rec.counts[phase]
        return (a - a0) + (f - f0)

    spans = [(0, position("fw_end"), "forward"), (position("bw_start"), position("bw_end"), "backward")]
    base = rec.allocated["fw_start"]
    current, live, best = base, {}, (0, None, -1)
    for i, e in enumerate(trace):
        current += e["size"] if e["action"] == "alloc" else -e["size"]
        if e["action"] == "alloc":
            live[e["addr"]] = e
        else:
            live.pop(e["addr"], None)
        for lo, hi, phase in spans:
            if lo <= i < hi and current - base > best[0]:
                best = (current - base, phase, i)
    out.step_peak_bytes = max(best[0], rec.allocated["fw_end"] - base, 0)
    out.peak_phase = best[1]
    if best[2] < 0:
        return
    live = {}
    for e in trace[:best[2] + 1]:
        if e["action"] == "alloc":
            live[e["addr"]] = e
        else:
            live.pop(e["addr"], None)
    largest = sorted(live.values(), key=lambda e: -e["size"])[:HOLDERS]
    out.holders = [f"{nbytes_text(e['size'])} {_where(e.get('frames') or [])}" for e in largest]


def _where(frames: list[dict]) -> str:
    """The innermost frame outside torch's own Python: file:line and its code (for
    Inductor's generated code, the buffer's line: ``buf12 = empty_strided_cuda(...)``)."""
    for frame in frames:
        path = frame.get("filename", "")
        if f"{os.sep}torch{os.sep}" in path and "torchinductor" not in path:
            continue
        text = linecache.getline(path, frame.get("line", 0)).strip()
        fx = frame.get("fx_node_name") or frame.get("fx_original_trace")
        where = f"{os.path.basename(path)}:{frame.get('line')} in {frame.get('name')}"
        return " ".join(x for x in (where, f"`{text[:90]}`" if text else "",
                                     f"(node {fx})" if isinstance(fx, str) and fx else "") if x)
    return "(no Python frame)"


# Called by the transfer ops while a recorder is active ----------------------------------

def copy_started(stream: torch.cuda.Stream) -> torch.cuda.Event:
    event = torch.cuda.Event(enable_timing=True)
    event.record(stream)
    return event


def copy_done(stream: torch.cuda.Stream, start: torch.cuda.Event, direction: str, nbytes: int) -> None:
    rec = active
    if rec is None:
        return
    end = torch.cuda.Event(enable_timing=True)
    end.record(stream)
    rec.copies.append((rec.phase, direction, nbytes, start, end))


def stall_before(stream: torch.cuda.Stream) -> torch.cuda.Event:
    return copy_started(stream)


def stall_after(stream: torch.cuda.Stream, before: torch.cuda.Event) -> None:
    rec = active
    if rec is None:
        return
    after = torch.cuda.Event(enable_timing=True)
    after.record(stream)
    rec.stalls.append((rec.phase, before, after))


class CudaSource:
    """Measures on CUDA devices, outside CUDA graph capture; elsewhere nothing."""

    def recorder(self, device: torch.device, call: int, what: str) -> Recorder | None:
        if device.type != "cuda" or not torch.cuda.is_available():
            return None
        if torch.cuda.is_current_stream_capturing():
            return None
        return CudaRecorder(device, call, what)


source: Source = CudaSource()


def set_source(new: Source | None) -> Source:
    """Replace the source of recorders (``None``: the CUDA one); returns the previous."""
    global source
    previous, source = source, (new if new is not None else CudaSource())
    return previous
