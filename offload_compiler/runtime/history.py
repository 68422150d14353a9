"""The CUDA caching allocator's history, as the memory measurement reads it.

``torch.cuda.memory._record_memory_history`` records every allocation and free with the
Python stack that made it. A memory recorder (``measure.CudaRecorder``, ``what="memory"``)
joins the recording when its forward starts and leaves it when its backward ends; the
records of its call are replayed into the step peak above what was held before the
forward, and the allocations live at that peak are named by source line.
"""

from __future__ import annotations

import linecache
import logging
import os
import weakref
from typing import Any

import torch

from ..nbytes import nbytes_text
from . import blocks

log = logging.getLogger(__name__)

#: Allocations live at the measured peak that are named (largest first).
HOLDERS = 5
#: Allocator records kept while measuring (one call: a few thousand are typical).
MAX_ENTRIES = 1_000_000


#: Per device index: the memory recorders between their forward's start and their
#: backward's end. Graphs split by a graph break are measured in the same step, their
#: calls nested (A's forward, B's forward, B's backward, A's backward): recording runs
#: while any of them needs it, and each reads the records from its own start.
_recording: dict[int, weakref.WeakSet] = {}


def join(rec: Any) -> bool:
    """Record the allocator's history for ``rec`` from now on; note where its records
    start (``rec.start``) and the allocator's layout now (``rec.segments``)."""
    index = _index(rec.device)
    if index not in _recording:
        if not _start(rec.device):
            return False
        _recording[index] = weakref.WeakSet()
    _recording[index].add(rec)
    snapshot = torch.cuda.memory._snapshot(rec.device)
    rec.start = len(snapshot["device_traces"][index])
    rec.segments = [s for s in snapshot.get("segments", []) if s.get("device", index) == index]
    return True


def leave(rec: Any) -> None:
    index = _index(rec.device)
    users = _recording.get(index, weakref.WeakSet())
    users.discard(rec)
    if not users:
        _recording.pop(index, None)
        torch.cuda.memory._record_memory_history(enabled=None, device=rec.device)


def _index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


def _start(device: torch.device) -> bool:
    try:
        torch.cuda.memory._record_memory_history(
            enabled="all", context="alloc", stacks="python", max_entries=MAX_ENTRIES,
            device=device)
        return True
    except Exception as e:  # noqa: BLE001 - an allocator without history: time only
        log.info("offload: cannot record the allocator's history on %s (%s); measuring time only",
                 device, e)
        return False


def trace(rec: Any) -> list[dict[str, Any]]:
    """The allocator's records on ``rec``'s device since ``rec`` joined, every action,
    oldest first."""
    try:
        snapshot = torch.cuda.memory._snapshot(rec.device, augment_with_fx_traces=True)
    except TypeError:  # torch without FX-augmented snapshots
        snapshot = torch.cuda.memory._snapshot(rec.device)
    return snapshot["device_traces"][_index(rec.device)][rec.start:]


def replay(rec: Any, out: Any) -> None:
    """Replay the allocator's records of the measured call: the peak above what was held
    at the forward's start, counted over the graph's own forward and backward (the
    memory taken between them, by other graphs, is carried, not counted as a peak), in
    the bytes the allocator's statistics count (``blocks``), and what was live at it."""
    records = rec.trace or []
    trace = [e for e in records if e["action"] in ("alloc", "free_requested")]
    a0, f0 = rec.counts["fw_start"]

    def position(phase: str) -> int:
        a, f = rec.counts[phase]
        return (a - a0) + (f - f0)

    base = rec.allocated["fw_start"]
    counted = {position(p): rec.allocated[p] for p in ("fw_end", "bw_start", "bw_end")}
    curve, why = _block_curve(rec, records, trace, counted)
    if curve is None:
        curve = _curve(base, trace, [e["size"] for e in trace])
    spans = [(0, position("fw_end"), "forward"), (position("bw_start"), position("bw_end"), "backward")]
    best = (0, None, -1)
    for i, current in enumerate(curve):
        for lo, hi, phase in spans:
            if lo <= i < hi and current - base > best[0]:
                best = (current - base, phase, i)
    peak = best[0]
    if why and best[1] is not None:
        # Requests only: add what the allocator counted beyond them at the phases
        # around the peak (exact there, an estimate between them).
        around = ("fw_end",) if best[1] == "forward" else ("bw_start", "bw_end")
        replayed = _at(base, curve, counted)
        peak += max([0] + [counted[position(p)] - replayed[position(p)] for p in around])
        log.info("offload: the allocator's records of call %d did not fit its layout (%s); its "
                 "step peak %s is requested bytes plus the allocator's rounding at the nearest "
                 "phases", rec.call, why, nbytes_text(peak))
    out.step_peak_bytes = max(peak, rec.allocated["fw_end"] - base, 0)
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


def _block_curve(rec: Any, records: list[dict[str, Any]], trace: list[dict[str, Any]],
                 counted: dict[int, int]) -> tuple[list[int] | None, str]:
    """The bytes allocated after each of ``trace``'s records, in the allocator's blocks
    rebuilt from the layout at the forward's start and checked against the allocator's
    counts at the phases; or ``None`` and why not."""
    try:
        sizes = blocks.block_bytes(rec.segments, records)
    except blocks.Unfit as e:
        return None, str(e)
    base = rec.allocated["fw_start"]
    curve = _curve(base, trace, sizes)
    if _at(base, curve, counted) != counted:
        return None, "the rebuilt blocks do not sum to the allocator's counts"
    return curve, ""


def _curve(base: int, trace: list[dict[str, Any]], sizes: list[int]) -> list[int]:
    """The bytes allocated after each record."""
    out, current = [], base
    for e, size in zip(trace, sizes):
        current += size if e["action"] == "alloc" else -size
        out.append(current)
    return out


def _at(base: int, curve: list[int], counted: dict[int, int]) -> dict[int, int]:
    """The curve at each position of ``counted`` (position p: after p records)."""
    return {p: curve[min(p, len(curve)) - 1] if p > 0 and curve else base for p in counted}


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
