"""The simulated schedule as a Chrome trace for Perfetto (``ui.perfetto.dev``).

:func:`chrome_trace` gives, for one graph, a process with a thread per lane (compute,
D2H, H2D) and a ``phase`` track (forward, backward). Slices are named by op and module
(``mm · blocks.0.attn.qkv``; copies ``d2h mm · blocks.0.attn.qkv``) and carry the
graph node, op, module, source line, bytes and the decision on the value. An arrow
(a flow event) joins each D2H copy to its H2D reload; counter tracks show the
activation memory of the plan, of nothing moved, and the budget; an instant event
marks where backward begins. A measured step (``measured_events``,
``measured_memory``) is a second process beside the predicted one.

:class:`Origins` names the simulator's ops lazily: the simulator records op indices and
tensor names, and only a report asks what they are.
"""

from __future__ import annotations

import json
import operator
from dataclasses import dataclass
from typing import Any, Sequence

import torch.fx as fx

from passes.nodes import called_op, tensor_bytes
from passes.provenance import module_path, source_line

from .._version import SCHEMA_VERSION
from ..nbytes import nbytes_text
from .records import GraphPlan

LANES = ("compute", "d2h", "h2d")
PHASE_TID = len(LANES)
#: The measured step of graph ``N`` is process ``MEASURED_PID + N`` (the plan's is ``N``).
MEASURED_PID = 1_000_000
MEASURED_KEYS = ("lane", "name", "start_ms", "dur_ms")
SEP = " · "


@dataclass(frozen=True)
class Origin:
    """One graph node in the user's terms."""

    node: str
    """The FX node's name (as in the dumped graph code)."""
    op: str
    """Short op name: ``mm``, ``gelu``, ``getitem``."""
    target: str
    """Full op name: ``aten.mm.default``."""
    module: str
    """Module path (``passes.provenance.module_path``), ``""`` for the root module."""
    source: str
    """``file.py:LINE in FUNCTION`` (``passes.provenance.source_line``), or ``""``."""
    nbytes: int
    """Bytes of the node's output."""
    recomputed: bool = False
    """A forward op run again in backward (min-cut put it there: ``partitioner_tag``)."""

    @classmethod
    def of(cls, node: Any, backward: bool = False) -> "Origin":
        target = called_op(node)[0]
        short, full = _op_names(target)
        if target is operator.getitem and node.args and isinstance(node.args[0], fx.Node):
            parent = called_op(node.args[0])[0]  # one output of a multi-output op
            short, full = (f"{name}[{node.args[1]}]" for name in _op_names(parent))
        return cls(node=node.name, op=short, target=full, module=module_path(node),
                   source=source_line(node), nbytes=tensor_bytes(node.meta.get("val")),
                   recomputed=backward and node.meta.get("partitioner_tag") == "is_forward")

    @property
    def label(self) -> str:
        """``mm · blocks.0.attn.qkv``, or ``mm`` for an op of the root module."""
        return f"{self.op}{SEP}{self.module}" if self.module else self.op


def _op_names(target: Any) -> tuple[str, str]:
    """``("mm", "aten.mm.default")`` for an op overload; the function's name otherwise."""
    packet = getattr(target, "overloadpacket", None)
    if packet is not None:
        return packet.__name__, str(target)
    name = getattr(target, "__name__", None) or str(target)
    return name, name


class Origins:
    """What the simulator's op indices (forward then backward) and tensor names (forward
    nodes) are. Holds the FX nodes and names them on first use; pickled (the plan
    cache) as the names alone."""

    def __init__(self, fw_nodes: Sequence[Any], bw_nodes: Sequence[Any]) -> None:
        self._fw, self._bw = fw_nodes, bw_nodes
        self._ops: dict[int, Origin] = {}
        self._by_name: dict[str, int] | None = None

    def op(self, index: int) -> Origin:
        """The op numbered ``index`` (backward op ``k`` is ``len(fw_nodes) + k``)."""
        found = self._ops.get(index)
        if found is None:
            n_fw = len(self._fw)
            node, backward = (self._fw[index], False) if index < n_fw else (self._bw[index - n_fw], True)
            found = self._ops[index] = Origin.of(node, backward)
        return found

    def in_backward(self, index: int) -> bool:
        """Whether op ``index`` is a backward op."""
        return index >= len(self._fw)

    def tensor(self, name: str) -> Origin | None:
        """The forward node that produced the saved value ``name``."""
        index = self._names().get(name)
        return None if index is None else self.op(index)

    def _names(self) -> dict[str, int]:
        if self._by_name is None:
            self._by_name = {n.name: i for i, n in enumerate(self._fw)}
        return self._by_name

    def __getstate__(self) -> dict[str, Any]:
        n = len(self._fw) + len(self._bw)
        return {"ops": [self.op(i) for i in range(n)], "n_fw": len(self._fw), "by_name": self._names()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        ops, n_fw = state["ops"], state["n_fw"]
        self._fw, self._bw = [None] * n_fw, [None] * (len(ops) - n_fw)
        self._ops = dict(enumerate(ops))
        self._by_name = state["by_name"]


def chrome_trace(plan: GraphPlan, *, title: str | None = None,
                 measured_events: list[dict[str, Any]] | None = None,
                 measured_memory: list[tuple[float, int]] | None = None) -> dict[str, Any]:
    """The simulated schedule of ``plan`` in the Chrome trace event format (see the module
    docstring); ``title`` names the process (default ``offload plan, graph N``).

    ``measured_events``: a measured step, each ``{"lane": "compute"|"d2h"|"h2d", "name":
    str, "start_ms": float, "dur_ms": float, "args": dict}``; ``measured_memory``:
    ``(ms, bytes)`` points. Either puts a process ``measured, graph N`` beside the plan's.
    """
    pid = plan.graph_id
    name = title or f"offload plan, graph {plan.graph_id}"
    events: list[dict[str, Any]] = _process(pid, name, 2 * pid, [*LANES, "phase"])
    sim = plan.simulation
    if sim is not None:
        events += _slices(plan, pid)
        events += _phases(pid, sim.fw_ms, sim.step_ms)
        events += _counter(pid, "activation memory (plan)", sim.memory)
    base = plan.baseline_simulation
    if base is not None:
        events += _counter(pid, "activation memory (nothing moved)", base.memory)
    budget = plan.predicted.budget_bytes if plan.predicted is not None else -1
    if budget >= 0:
        end = max(sim.step_ms if sim else 0.0, base.step_ms if base else 0.0)
        events += _counter(pid, "activation budget", [(0.0, budget), (end, budget)])
    if measured_events or measured_memory:
        events += _measured(plan.graph_id, measured_events or [], measured_memory or [])
    return {"traceEvents": events, "displayTimeUnit": "ms", "schema_version": SCHEMA_VERSION}


def trace_json(trace: dict[str, Any]) -> str:
    """``trace`` as JSON text with one event per line (readable, and what TORCH_TRACE's
    structured log expects of a payload: no line arbitrarily long)."""
    lines = ",\n".join(json.dumps(e) for e in trace["traceEvents"])
    rest = "".join(f', {json.dumps(k)}: {json.dumps(v)}' for k, v in trace.items() if k != "traceEvents")
    return f'{{"traceEvents": [\n{lines}\n]{rest}}}\n'


def _process(pid: int, name: str, sort_index: int, threads: list[str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [
        {"ph": "M", "pid": pid, "name": "process_name", "args": {"name": name}},
        {"ph": "M", "pid": pid, "name": "process_sort_index", "args": {"sort_index": sort_index}}]
    for tid, thread in enumerate(threads):
        out.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": thread}})
        out.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_sort_index",
                    "args": {"sort_index": tid}})
    return out


def _slices(plan: GraphPlan, pid: int) -> list[dict[str, Any]]:
    """One slice per simulated event, named and with arguments, and a flow from each D2H
    copy to its reload."""
    sim = plan.simulation
    origins: Origins | None = sim.origins
    decided = {d.name: d for d in plan.decisions}
    out, copies = [], {}
    for lane, op, tensor, start, end in sim.events:
        at = origins.op(op) if origins is not None else None
        value = decided.get(tensor)
        source = origins.tensor(tensor) if origins is not None and tensor else None
        if lane == "compute" and not tensor:
            label = at.label if at else f"op {op}"
            args = _origin_args(at)
            saved = decided.get(at.node) if at else None
            if at is not None and at.recomputed:  # a forward op min-cut runs again in backward
                label, args["decision"] = f"recompute {label}", "recompute"
            elif saved is not None:  # this op's output is saved for backward
                args["decision"] = saved.decision.value
        else:
            what = "recompute" if lane == "compute" else lane
            label = f"{what} {source.label}" if source else f"{what} {tensor}"
            args = {**_origin_args(source), "tensor": tensor}
            if value is not None:
                args.update(bytes=nbytes_text(value.nbytes), nbytes=value.nbytes,
                            decision=value.decision.value)
            if lane == "h2d" and at is not None:
                args["issued before"] = at.label
        ts, dur = start * 1e3, max(end - start, 0.0) * 1e3
        out.append({"ph": "X", "pid": pid, "tid": LANES.index(lane), "name": label, "cat": lane,
                    "ts": ts, "dur": dur, "args": args})
        if lane in ("d2h", "h2d"):
            copies.setdefault(tensor, {})[lane] = (ts + dur / 2, label)
    flow_id = pid * 100_000
    for tensor, ends in copies.items():
        if "d2h" not in ends or "h2d" not in ends:
            continue
        flow_id += 1
        for ph, lane in (("s", "d2h"), ("f", "h2d")):
            event = {"ph": ph, "pid": pid, "tid": LANES.index(lane), "id": flow_id, "cat": "offload",
                     "name": f"offload {tensor}", "ts": ends[lane][0]}
            if ph == "f":
                event["bp"] = "e"  # bound to the enclosing slice: the reload
            out.append(event)
    return out


def _origin_args(at: Origin | None) -> dict[str, Any]:
    if at is None:
        return {}
    return {"node": at.node, "op": at.target, "module": at.module or "(root)",
            "source": at.source or "(unknown)", "bytes": nbytes_text(at.nbytes), "nbytes": at.nbytes}


def _phases(pid: int, fw_ms: float, step_ms: float) -> list[dict[str, Any]]:
    return [
        {"ph": "X", "pid": pid, "tid": PHASE_TID, "name": "forward", "cat": "phase",
         "ts": 0.0, "dur": fw_ms * 1e3, "args": {"ms": round(fw_ms, 4)}},
        {"ph": "X", "pid": pid, "tid": PHASE_TID, "name": "backward", "cat": "phase",
         "ts": fw_ms * 1e3, "dur": max(step_ms - fw_ms, 0.0) * 1e3, "args": {"ms": round(step_ms - fw_ms, 4)}},
        {"ph": "i", "s": "p", "pid": pid, "tid": PHASE_TID, "name": "backward begins", "cat": "phase",
         "ts": fw_ms * 1e3},
    ]


def _counter(pid: int, name: str, points: Sequence[tuple[float, int]]) -> list[dict[str, Any]]:
    return [{"ph": "C", "pid": pid, "name": name, "ts": t * 1e3, "args": {"MiB": held / 2**20}}
            for t, held in points]


def _measured(graph_id: int, events: list[dict[str, Any]],
              memory: list[tuple[float, int]]) -> list[dict[str, Any]]:
    """The measured step as a process of its own, sorted right after the plan's."""
    pid = MEASURED_PID + graph_id
    out = _process(pid, f"measured, graph {graph_id}", 2 * graph_id + 1, [f"{lane} (measured)" for lane in LANES])
    for i, e in enumerate(events):
        missing = [k for k in MEASURED_KEYS if k not in e]
        if missing:
            raise ValueError(f"measured_events[{i}] lacks {missing}; each needs {list(MEASURED_KEYS)} "
                             f"(and optionally 'args')")
        if e["lane"] not in LANES:
            raise ValueError(f"measured_events[{i}]: lane {e['lane']!r}; valid lanes are {LANES}")
        out.append({"ph": "X", "pid": pid, "tid": LANES.index(e["lane"]), "name": str(e["name"]),
                    "cat": f"measured {e['lane']}", "ts": float(e["start_ms"]) * 1e3,
                    "dur": max(float(e["dur_ms"]), 0.0) * 1e3, "args": dict(e.get("args") or {})})
    for i, point in enumerate(memory):
        if len(point) != 2:
            raise ValueError(f"measured_memory[{i}] is {point!r}; give (ms, bytes) pairs")
    out += _counter(pid, "activation memory (measured)", [(float(t), int(b)) for t, b in memory])
    return out
