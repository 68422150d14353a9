"""Plans as data and text: JSON records, the decision table and the summary.

The machine-readable contract (the same in ``explain``'s report and in a dump's
``plan.json``): ``decisions`` is a list of records with at least ``name``, ``nbytes``,
``decision`` (``"keep"``, ``"offload"`` or ``"recompute"``) and ``reason``;
``predicted`` has at least ``activation_peak_bytes``, ``baseline_activation_peak_bytes``,
``peak_bytes``, ``step_ms`` and ``baseline_step_ms``.
"""

from __future__ import annotations

import json
from typing import Any

from tabulate import tabulate

from .._version import SCHEMA_VERSION
from ..nbytes import ByteSize
from .records import GraphPlan

def decision_dicts(plan: GraphPlan) -> list[dict[str, Any]]:
    sim = plan.simulation
    out = []
    for d in plan.decisions:
        out.append({
            "name": d.name, "producer": d.producer, "shape": list(d.shape), "dtype": d.dtype,
            "device": d.device, "nbytes": d.nbytes, "decision": d.decision.value,
            "copy_ms": round(sim.copy_ms[d.name], 4) if sim and d.name in sim.copy_ms else None,
            "reason": d.reason,
        })
    return out


def plan_dict(plan: GraphPlan, config: Any = None) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "graph_id": plan.graph_id,
        "summary": plan.summary(),
        "note": plan.note,
        "decisions": decision_dicts(plan),
        "predicted": plan.predicted.as_dict() if plan.predicted else {},
        "hardware": dict(plan.hardware),
        "config": None if config is None else {k: _jsonable(v) for k, v in config.as_dict().items()},
    }


def config_dict(config: Any) -> dict[str, Any]:
    """``config.json``: the options as given (a byte budget as its text, ``"12GiB"``)."""
    return {"schema_version": SCHEMA_VERSION,
            **{k: _jsonable(v) for k, v in config.as_dict().items()}}


def _jsonable(v: Any) -> Any:
    if isinstance(v, ByteSize):
        return str(v)
    if isinstance(v, tuple):
        return [_jsonable(x) for x in v]
    return v


def decision_table(plan: GraphPlan) -> str:
    rows = []
    for d in decision_dicts(plan):
        rows.append([d["name"], d["producer"], "x".join(map(str, d["shape"])), d["dtype"],
                     d["nbytes"], d["decision"], _ms(d["copy_ms"]), d["reason"]])
    return tabulate(rows, headers=["tensor", "producer", "shape", "dtype", "bytes", "decision",
                                   "copy ms", "reason"], maxcolwidths=[None] * 7 + [70])


def _ms(x):
    return "" if x is None else f"{x:.3f}"


def summary_text(plan: GraphPlan) -> str:
    count = {k: 0 for k in ("keep", "offload", "recompute")}
    nbytes = dict(count)
    for d in plan.decisions:
        count[d.decision.value] += 1
        nbytes[d.decision.value] += d.nbytes
    lines = [f"graph {plan.graph_id}"]
    for k in ("keep", "offload", "recompute"):
        lines.append(f"  {k:<10} {count[k]:>4} tensors  {nbytes[k] / 2**20:10.1f} MiB")
    p = plan.predicted
    if p:
        lines.append(f"  activation peak  {p.activation_peak_bytes / 2**20:10.1f} MiB "
                     f"(nothing moved: {p.baseline_activation_peak_bytes / 2**20:.1f} MiB)")
        if p.step_peak_bytes:
            lines.append(f"  step peak        {p.step_peak_bytes / 2**20:10.1f} MiB "
                         f"(nothing moved: {p.baseline_step_peak_bytes / 2**20:.1f} MiB; "
                         "with gradients and temporaries)")
        lines.append(f"  step time        {p.step_ms:10.2f} ms  "
                     f"(nothing moved: {p.baseline_step_ms:.2f} ms; stalls {p.stall_ms:.2f} ms)")
    if plan.note:
        lines.append(f"  note: {plan.note}")
    return "\n".join(lines)


def to_json(obj: Any) -> str:
    return json.dumps(obj, indent=2, default=str)
