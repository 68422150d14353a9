"""A sampling profiler of one thread, for benchmarks: where wall time goes without
wrapping any function (``cProfile`` and function timers change what they measure).

    sampler = Sampler(interval_s=0.002)
    sampler.start()
    ...                       # the work, on this thread
    sampler.stop()
    print(sampler.table(inside="call_user_compiler", outside="create_aot_dispatcher_function"))
    sampler.save("out/stacks.json.gz")

A background thread takes the sampled thread's Python stack every ``interval_s``
(``sys._current_frames``); each sample weighs the wall time since the one before. A
function is named ``file.py:function``; ``inside``/``outside`` pick the samples whose
stack holds (or does not hold) a function whose name ends with the text given.
``save`` writes every stack (frames as indices into a table of names), to be read back
with :func:`load` and queried again.
"""

from __future__ import annotations

import gzip
import json
import os
import sys
import threading
import time
from collections import Counter


class Sampler:
    """Samples the Python stack of the thread that creates it."""

    def __init__(self, interval_s: float = 0.002) -> None:
        self.interval_s = interval_s
        self.target = threading.get_ident()
        self.names: dict[object, int] = {}  # code object -> index in self.table
        self.frames: list[str] = []
        self.stacks: Counter[tuple[int, ...]] = Counter()  # outermost first -> seconds
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="stack-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _name(self, code) -> int:
        index = self.names.get(code)
        if index is None:
            index = self.names[code] = len(self.frames)
            self.frames.append(f"{os.path.basename(code.co_filename)}:{code.co_qualname}"
                               if hasattr(code, "co_qualname")
                               else f"{os.path.basename(code.co_filename)}:{code.co_name}")
        return index

    def _run(self) -> None:
        last = time.perf_counter()
        while not self._stop.wait(self.interval_s):
            frame = sys._current_frames().get(self.target)
            now = time.perf_counter()
            stack = []
            while frame is not None:
                stack.append(self._name(frame.f_code))
                frame = frame.f_back
            self.stacks[tuple(reversed(stack))] += now - last
            last = now

    def save(self, path: str) -> None:
        with gzip.open(path, "wt") as f:
            json.dump({"frames": self.frames,
                       "stacks": [[list(s), t] for s, t in self.stacks.items()]}, f)

    def table(self, inside: str | None = None, outside: str | tuple[str, ...] = (), top: int = 25) -> str:
        return table(self.frames, self.stacks, inside, outside, top)


def load(path: str) -> tuple[list[str], Counter]:
    """The frames and stacks :meth:`Sampler.save` wrote."""
    with gzip.open(path, "rt") as f:
        data = json.load(f)
    return data["frames"], Counter({tuple(s): t for s, t in data["stacks"]})


def table(frames: list[str], stacks: Counter, inside: str | None = None,
          outside: str | tuple[str, ...] = (), top: int = 25) -> str:
    """The seconds of the samples with a function ending in ``inside`` on their stack and
    none ending in ``outside`` (a text or several), and the functions they were spent in
    (inclusive, each counted once per sample), most first; the functions on the stack of
    every such sample (the callers of ``inside``) are left out, and the seconds spent
    importing modules are given on their own."""
    outside = (outside,) if isinstance(outside, str) else tuple(outside)
    ins = {i for i, n in enumerate(frames) if inside and n.endswith(inside)}
    outs = {i for i, n in enumerate(frames) if any(n.endswith(o) for o in outside)}
    imports = {i for i, n in enumerate(frames) if n.endswith(":_find_and_load")}
    total, importing, per = 0.0, 0.0, Counter()
    for stack, seconds in stacks.items():
        held = set(stack)
        if (inside and not held & ins) or held & outs:
            continue
        total += seconds
        importing += seconds if held & imports else 0.0
        for index in held:
            per[index] += seconds
    what = " ".join(x for x in (f"inside {inside}" if inside else "",
                                f"outside {', '.join(outside)}" if outside else "") if x)
    lines = [f"  {total:7.2f} s sampled{(' ' + what) if what else ''}, {importing:.2f} s of it importing"]
    for index, seconds in [(i, t) for i, t in per.most_common() if t < total - 1e-9][:top]:
        lines.append(f"  {seconds:7.2f}  {frames[index]}")
    return "\n".join(lines)
