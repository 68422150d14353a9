"""Dumps: one folder per compiled graph, written when ``dump_dir`` (or the environment
variable ``OFFLOAD_COMPILER_DUMP_DIR``) is set.

    DUMP_DIR/graph_000/
        joint.py                      the joint graph the partitioner received
        forward.0_partitioned.py      after torch's min-cut partitioner (and backward.*)
        forward.1_recomputed.py       after re-partitioning with recompute tags (if any)
        forward.2_transfers.py        after inserting the transfer nodes
        forward.3_scheduled.py        after scheduling; stream, event and bytes beside
                                      every transfer node
        plan.json  plan.txt  summary.txt  config.json  timeline.json  memory.svg

Graph files are readable, runnable Python (``import offload_compiler`` registers the
transfer ops) with shapes, strides, dtypes and devices in the annotations. A stage is
written only if it changed the graph. Folder names count the graphs compiled into the
dump directory by this process, in order, so a rerun writes the same names.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import torch.fx as fx

from . import tables, timeline
from .graph_text import graph_text
from .records import GraphPlan

ENV = "OFFLOAD_COMPILER_DUMP_DIR"
HEADER = ("# Dumped by offload_compiler. Runnable: build the module with the inputs its\n"
          "# signature names. Annotations give dtype[shape][strides]device.\n"
          "import torch\nimport offload_compiler  # registers torch.ops.offload.*\n"
          "from torch import device\n\n")

_lock = threading.Lock()
_counters: dict[str, int] = {}


def dump_root(config_dir: str | None) -> Path | None:
    root = config_dir or os.environ.get(ENV)
    return Path(root) if root else None


class Dumper:
    """Collects the stages of one graph and writes them (a no-op without a root)."""

    def __init__(self, root: Path | None) -> None:
        self.root = root
        self.folder: Path | None = None
        self._last: dict[str, str] = {}
        self._stage = 0
        self.graph_files: dict[str, str] = {}
        """Graph files written so far (name -> text), kept with a cached plan."""
        if root is not None:
            key = str(root.resolve())
            with _lock:
                index = _counters.get(key, 0)
                _counters[key] = index + 1
            self.folder = root / f"graph_{index:03d}"
            self.folder.mkdir(parents=True, exist_ok=True)

    @property
    def enabled(self) -> bool:
        return self.folder is not None

    def joint(self, gm: fx.GraphModule) -> None:
        if self.enabled:
            self.graph_files["joint.py"] = HEADER + graph_text(gm)
            self._write("joint.py", self.graph_files["joint.py"])

    def stage(self, name: str, fw: fx.GraphModule, bw: fx.GraphModule) -> None:
        """Write forward and backward after a pass, if that pass changed them."""
        if not self.enabled:
            return
        wrote = False
        for kind, gm in (("forward", fw), ("backward", bw)):
            text = graph_text(gm)
            if self._last.get(kind) != text:
                file = f"{kind}.{self._stage}_{name}.py"
                self.graph_files[file] = HEADER + text
                self._write(file, self.graph_files[file])
                self._last[kind] = text
                wrote = True
        if wrote:
            self._stage += 1

    def plan(self, plan: GraphPlan, config: Any) -> None:
        if not self.enabled:
            return
        data = tables.plan_dict(plan, config)
        self._write("plan.json", tables.to_json(data))
        self._write("plan.txt", tables.decision_table(plan) + "\n")
        self._write("summary.txt", tables.summary_text(plan) + "\n")
        self._write("config.json", tables.to_json(data["config"]))
        self._write("timeline.json", json.dumps(timeline.chrome_trace(plan)))
        self._write("memory.svg", timeline.memory_svg(plan))

    def replay(self, graph_files: dict[str, str]) -> None:
        """Write graph files recorded by an earlier compile of the same graph."""
        if self.enabled:
            for name, text in graph_files.items():
                self._write(name, text)

    def _write(self, name: str, text: str) -> None:
        assert self.folder is not None
        (self.folder / name).write_text(text)
