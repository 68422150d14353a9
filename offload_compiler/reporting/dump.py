"""Dumps: one folder per compiled graph, written when ``dump_dir`` (or the environment
variable ``OFFLOAD_COMPILER_DUMP_DIR``) is set.

    DUMP_DIR/graph_000/
        joint.py                      the joint graph the partitioner received
        forward.0_partitioned.py      after torch's min-cut partitioner (and backward.*)
        forward.1_recomputed.py       after re-partitioning with recompute tags (if any)
        forward.2_transfers.py        after inserting the transfer nodes
        forward.3_scheduled.py        after scheduling; stream, event and bytes beside
                                      every transfer node
        plan.json  plan.txt  summary.txt  config.json  timeline.json  memory.png
        measured.json                 on a GPU: the measured call against the prediction
                                      (``write_measured``; ``timeline.json`` is written
                                      again with the measured schedule beside it)

Graph files are readable, runnable Python (``import offload_compiler`` registers the
transfer ops) with shapes, strides, dtypes and devices in the annotations. A stage is
written only if it changed the graph.

Two numbers, both shown. Folder names count the graphs compiled into *this dump
directory* by this process, in order, so a rerun writes the same names. The graph id
(``graph 2`` in the INFO log line, ``GraphPlan.graph_id``, ``plan.json``'s ``graph_id``)
counts every graph the backend planned in the process, whatever its dump directory, so
the two differ as soon as a process compiles with more than one backend or dump
directory. Every file written names both: the first line of ``summary.txt`` and
``plan.txt`` and a comment at the top of every graph file read
``graph 2 (dump folder graph_000)``; ``plan.json`` has ``graph_id`` and
``dump_folder``; the trace in ``timeline.json`` is titled the same way.
``timeline.json`` is the simulated schedule for Perfetto (``reporting.timeline``);
``memory.png`` plots activation memory over the step (``reporting.plots``; needs
matplotlib, and without it is left out with one WARNING per process).

A dump never stops training: a folder that cannot be created or a file that cannot be
written (a path under a regular file, a full disk) is logged once per dump directory
per process, at WARNING with the folder and the OS error, and that graph's dump stops
there (what was written stays, and ``inspect`` says what is missing).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

import torch.fx as fx

from . import plots, tables, timeline
from .graph_text import graph_text
from .records import GraphPlan

log = logging.getLogger(__name__)

ENV = "OFFLOAD_COMPILER_DUMP_DIR"
HEADER = ("# Dumped by offload_compiler. Runnable: build the module with the inputs its\n"
          "# signature names. Annotations give dtype[shape][strides]device.\n"
          "import torch\nimport offload_compiler  # registers torch.ops.offload.*\n"
          "from torch import device\n\n")

_lock = threading.Lock()
_counters: dict[str, int] = {}
_warned: set[str] = set()
_plot_failed = False


def dump_root(config_dir: str | None) -> Path | None:
    root = config_dir or os.environ.get(ENV)
    return Path(root) if root else None


def _key(root: Path) -> str:
    return os.path.realpath(root)  # never raises, unlike Path.resolve on some paths


class Dumper:
    """Collects the stages of one graph and writes them (a no-op without a root, or once
    a write has failed)."""

    def __init__(self, root: Path | None, graph_id: int | None = None) -> None:
        self.root = root
        self.folder: Path | None = None
        self.graph_id = graph_id
        self._last: dict[str, str] = {}
        self._stage = 0
        self._replayed = False
        self.graph_files: dict[str, str] = {}
        """Graph files written so far (name -> graph text, without the header), kept with a
        cached plan and written again by :meth:`replay`."""
        if root is None:
            return
        with _lock:
            index = _counters.get(_key(root), 0)
            _counters[_key(root)] = index + 1
        folder = root / f"graph_{index:03d}"
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            self._give_up(error)
            return
        self.folder = folder
        log.debug("offload: %s is dumped to %s", self.label, folder)

    @property
    def enabled(self) -> bool:
        return self.folder is not None

    @property
    def label(self) -> str:
        """``graph 2 (dump folder graph_000)``: the process-wide graph id and the folder."""
        name = self.folder.name if self.folder is not None else "none"
        return (f"graph {self.graph_id} (dump folder {name})" if self.graph_id is not None
                else f"dump folder {name}")

    def joint(self, gm: fx.GraphModule) -> None:
        if self.enabled:
            self.graph_files["joint.py"] = graph_text(gm)
            self._write("joint.py", self._header() + self.graph_files["joint.py"])

    def stage(self, name: str, fw: fx.GraphModule, bw: fx.GraphModule) -> None:
        """Write forward and backward after a pass, if that pass changed them."""
        if not self.enabled or self._replayed:
            return
        wrote = False
        for kind, gm in (("forward", fw), ("backward", bw)):
            text = graph_text(gm)
            if self._last.get(kind) != text:
                file = f"{kind}.{self._stage}_{name}.py"
                self.graph_files[file] = text
                self._write(file, self._header() + text)
                self._last[kind] = text
                wrote = True
        if wrote:
            self._stage += 1

    def plan(self, plan: GraphPlan, config: Any) -> None:
        if not self.enabled:
            return
        if self.graph_id is None:
            self.graph_id = plan.graph_id
        assert self.folder is not None
        data = {**tables.plan_dict(plan, config), "dump_folder": self.folder.name}
        self._write("plan.json", tables.to_json(data))
        self._write("plan.txt", f"{self.label}: decisions\n" + tables.decision_table(plan) + "\n")
        self._write("summary.txt", self._titled(tables.summary_text(plan), plan.graph_id) + "\n")
        self._write("config.json", tables.to_json(None if config is None else tables.config_dict(config)))
        self._write("timeline.json", timeline.trace_json(
            timeline.chrome_trace(plan, title=f"offload plan, {self.label}")))
        self._plot("memory.png", lambda: plots.memory_figure(plan, config=config),
                   f"memory.png of {self.label} (activation memory over the step)")

    def replay(self, graph_files: dict[str, str]) -> None:
        """Write the graph files recorded by the compile that made a cached plan; the
        stages of this compile are then not written again (they are the same graphs)."""
        if self.enabled:
            for name, text in graph_files.items():
                self._write(name, self._header() + text)
            self.graph_files = dict(graph_files)
            self._replayed = True

    def _header(self) -> str:
        return f"# {self.label}\n" + HEADER

    def _titled(self, summary: str, graph_id: int) -> str:
        """The summary with its first line ``graph 2`` made ``graph 2 (dump folder ...)``."""
        first, sep, rest = summary.partition("\n")
        if first == f"graph {graph_id}":
            return self.label + sep + rest
        return self.label + "\n" + summary

    def _write(self, name: str, text: str) -> None:
        if self.folder is None:  # an earlier write of this graph failed
            return
        try:
            (self.folder / name).write_text(text, encoding="utf-8")
        except OSError as error:
            self._give_up(error)

    def _plot(self, name: str, make, what: str) -> None:
        """Draw and write a plot; without matplotlib a WARNING once per process (``plots``).
        A plot that fails to draw is said once per process and the dump goes on."""
        global _plot_failed
        if self.folder is None:
            return
        try:
            plots.save_or_warn(make, self.folder / name, what)
        except OSError as error:
            self._give_up(error)
        except Exception as error:  # a plotting bug must not stop training
            with _lock:
                first, _plot_failed = not _plot_failed, True
            if first:
                log.warning("offload: %s not drawn (%s: %s); the rest of the dump is written. "
                            "Said once.", what, type(error).__name__, error)

    def _give_up(self, error: OSError) -> None:
        """Stop this graph's dump; say so once per dump directory per process."""
        assert self.root is not None
        self.folder = None
        with _lock:
            first = _key(self.root) not in _warned
            _warned.add(_key(self.root))
        if first:
            env = os.environ.get(ENV)
            source = (f"{ENV} (the environment variable)" if env and Path(env) == self.root
                      else "dump_dir")
            log.warning(
                "offload: cannot write the dump to %s (%s); training goes on without it. "
                "Set %s to a writable folder, or unset it. Said once per dump folder.",
                self.root, error, source)


def write_measured(plan: GraphPlan) -> None:
    """``measured.json`` beside the plan in the graph's dump folder, if it has one, and
    ``timeline.json`` again with the measured schedule beside the predicted one."""
    if not plan.dump_folder:
        return
    try:
        with open(os.path.join(plan.dump_folder, "measured.json"), "w") as f:
            json.dump({"schema_version": 1, "graph_id": plan.graph_id,
                       "measured": plan.measured.as_dict(),
                       "predicted": plan.predicted.as_dict() if plan.predicted else None,
                       "predicted_holders": plan.predicted_holders(),
                       "corrections": plan.corrections}, f, indent=1)
        if plan.measured.events and plan.simulation is not None:
            trace = timeline.chrome_trace(plan, title=f"offload plan, graph {plan.graph_id}",
                                          measured_events=plan.measured.events)
            with open(os.path.join(plan.dump_folder, "timeline.json"), "w") as f:
                f.write(timeline.trace_json(trace))
    except OSError as e:
        log.warning("offload: could not write the measurement in %s: %s", plan.dump_folder, e)
