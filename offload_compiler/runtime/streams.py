"""Copy streams: one device-to-host and one host-to-device stream per device.

Streams are created lazily, on the first transfer that needs them, never at import,
and live outside any compiled graph so graphs compiled separately (one per block)
share them. The two directions run on separate copy engines, so a D2H copy, an H2D
copy and compute overlap.

Ordering rules (see docs/design.md, "Runtime rules"):

- The *live* compute stream is read (:func:`current`, what
  ``torch.cuda.current_stream(device)`` answers) at the moment a transfer is issued, before entering any stream context: inside
  ``with torch.cuda.stream(s)`` the current stream is ``s`` and waiting on it would be
  a no-op.
- Cross-stream order uses events only; nothing here blocks the host.
"""

from __future__ import annotations

import threading

import torch

_lock = threading.Lock()
_streams: dict[tuple[str, int], torch.cuda.Stream] = {}

D2H = "d2h"
H2D = "h2d"


def copy_stream(device: torch.device, direction: str) -> torch.cuda.Stream:
    """The copy stream of ``direction`` (``"d2h"`` or ``"h2d"``) on a CUDA ``device``."""
    if direction not in (D2H, H2D):
        raise ValueError(f"direction={direction!r}; valid values are {(D2H, H2D)}")
    index = device.index if device.index is not None else torch.cuda.current_device()
    key = (direction, index)
    stream = _streams.get(key)
    if stream is None:
        with _lock:
            stream = _streams.get(key)
            if stream is None:
                stream = torch.cuda.Stream(device=torch.device("cuda", index))
                _streams[key] = stream
    return stream


# Stream objects by what torch reports of the current stream: (id, device, type).
_known: dict[tuple[int, int, int], torch.cuda.Stream] = {}


def current(device: torch.device) -> torch.cuda.Stream:
    """The live (current) stream of CUDA ``device``, as ``torch.cuda.current_stream``
    answers; each stream's Python object is made once (on an H100's host that call
    took 5 us, a third of it building the object, on every transfer op)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    data = torch._C._cuda_getCurrentStream(index)
    stream = _known.get(data)
    if stream is None:
        if len(_known) >= 256:  # streams a user made and dropped
            _known.clear()
        stream = _known[data] = torch.cuda.Stream(stream_id=data[0], device_index=data[1], device_type=data[2])
    return stream


def enter(stream: torch.cuda.Stream) -> int:
    """Make ``stream`` current (and its device); returns the device that was current,
    for :func:`leave`. The torch calls underneath ``torch.cuda.set_stream`` and
    ``torch.cuda.current_device``, made directly: a transfer op makes two such switches,
    and their Python wrappers, with a generator's context manager around them, took an
    H100 host 5 us of each op's 40 to 70 (``benchmarks/RESULTS.md``, session 31)."""
    device = torch._C._cuda_getDevice()
    torch._C._cuda_setStream(stream_id=stream.stream_id, device_index=stream.device_index,
                             device_type=stream.device_type)
    return device


def leave(compute: torch.cuda.Stream, device: int) -> None:
    """Make ``compute`` current again (the stream that was current on its device, which
    the caller read before :func:`enter`), then ``device``. ``set_stream`` also makes the
    stream's device current: without putting the device back, a model on ``cuda:1`` left
    ``cuda:1`` current for a user who had ``cuda:0`` (found by the two-GPU test)."""
    torch._C._cuda_setStream(stream_id=compute.stream_id, device_index=compute.device_index,
                             device_type=compute.device_type)
    if compute.device_index != device:  # tensors on another GPU than the current one
        torch._C._cuda_setDevice(device)


class on:
    """``with on(stream, compute)``: :func:`enter` ``stream``, then :func:`leave` for
    ``compute``. Cheaper on the host than ``torch.cuda.stream(stream)``, which reads the
    current stream again, twice, and than a generator's context manager."""

    __slots__ = ("stream", "compute", "device")

    def __init__(self, stream: torch.cuda.Stream, compute: torch.cuda.Stream) -> None:
        self.stream, self.compute = stream, compute

    def __enter__(self) -> None:
        self.device = enter(self.stream)

    def __exit__(self, *exc: object) -> None:
        leave(self.compute, self.device)


# Per thread, an event per compute stream, recorded and waited on at once by ``follow``.
_points = threading.local()


def follow(stream: torch.cuda.Stream, compute: torch.cuda.Stream) -> None:
    """``stream`` waits for the work queued on ``compute`` so far, as
    ``stream.wait_stream(compute)`` does, with an event reused instead of a new one each
    time: a wait takes the state of the event's last record when it is queued, so the
    event may be recorded again right after. One per thread: another thread's record
    between this thread's record and its wait would be waited for instead."""
    events = getattr(_points, "events", None)
    if events is None or len(events) >= 256:  # streams a user made and dropped
        events = _points.events = {}
    key = (compute.stream_id, compute.device_index)
    event = events.get(key)
    if event is None:
        event = events[key] = torch.cuda.Event()
    event.record(compute)
    stream.wait_event(event)


def mark_ready(stream: torch.cuda.Stream) -> torch.cuda.Event:
    """Record and return an event on ``stream`` at the current point of its queue."""
    event = torch.cuda.Event()
    event.record(stream)
    return event



# Fault injection for race tests: GPU cycles to spin on a copy stream before each copy.
_delay_cycles = {D2H: 0, H2D: 0}


def set_copy_delay(*, d2h: int = 0, h2d: int = 0) -> None:
    """Make every later copy spin ``d2h`` / ``h2d`` GPU cycles on its stream first.

    For tests only: a delayed copy stream exposes any missing cross-stream wait as a
    wrong result. ``set_copy_delay()`` turns it off.
    """
    for name, value in ((D2H, d2h), (H2D, h2d)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name}={value!r}: give a non-negative number of cycles")
        _delay_cycles[name] = value


def inject_delay(direction: str) -> None:
    """Spin the current (copy) stream if a delay was set for ``direction``."""
    cycles = _delay_cycles[direction]
    if cycles:
        torch.cuda._sleep(cycles)
