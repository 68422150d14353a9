"""Plans as data and text: JSON records, the decision table and the summary.

The machine-readable contract (the same in ``explain``'s report and in a dump's
``plan.json``): ``decisions`` is a list of records with at least ``name``, ``nbytes``,
``decision`` (``"keep"``, ``"offload"`` or ``"recompute"``), ``reason``, ``kind``
(``"activation"``, or ``"input"``: a parameter, buffer or model input saved as it is),
``module_path`` and ``source_line`` (``"blocks.0.attn.qkv"``, ``"gpt.py:85 in forward"``;
``""`` where unknown), in the graph's order, sizes in bytes; ``predicted`` has at least ``activation_peak_bytes``, ``baseline_activation_peak_bytes``,
``peak_bytes``, ``step_ms`` and ``baseline_step_ms``.

Text tables are for people: largest first, sizes in KiB/MiB/GiB, at most
:data:`TABLE_WIDTH` columns wide, optionally the ``top`` rows only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from .records import ACTIVATION, GraphPlan, nbytes_text

from .._version import SCHEMA_VERSION
from ..nbytes import ByteSize

def decision_dicts(plan: GraphPlan) -> list[dict[str, Any]]:
    sim = plan.simulation
    out = []
    for d in plan.decisions:
        out.append({
            "name": d.name, "producer": d.producer, "shape": list(d.shape), "dtype": d.dtype,
            "device": d.device, "nbytes": d.nbytes, "decision": d.decision.value,
            "copy_ms": round(sim.copy_ms[d.name], 4) if sim and d.name in sim.copy_ms else None,
            "reason": d.reason, "module_path": d.module_path, "source_line": d.source_line,
            "kind": d.kind,
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


#: Text tables fit a terminal this many columns wide.
TABLE_WIDTH = 100
#: Reasons wrap over at most this many lines in text tables (in full in the JSON records).
REASON_LINES = 4
_SEP = "  "
#: Widest size, decision, module and tensor columns; the reason column takes the rest.
_SIZE, _DECISION, _WHERE, _TENSOR = 10, 9, 28, 22
_SHORT_DTYPES = {"bfloat16": "bf16", "float16": "f16", "float32": "f32", "float64": "f64"}


def decision_table(plan: GraphPlan | Sequence[Mapping[str, Any]], *, top: int | None = None,
                   width: int = TABLE_WIDTH) -> str:
    """The decisions as text: the saved activations largest first, then (apart) the
    parameters and inputs saved as they are. Rows name the module path and source line
    (the FX name and op beside them), sizes are in KiB/MiB/GiB, long reasons wrap and
    are cut after :data:`REASON_LINES` lines. ``top``: at most that many rows per section,
    with a line saying how many were left out and their bytes. Takes a plan or its JSON
    records (``decision_dicts``, a dump's ``plan.json``; records of older dumps, without
    ``kind`` or ``module_path``, read as activations of no known module)."""
    top = check_top(top)
    records = decision_dicts(plan) if isinstance(plan, GraphPlan) else list(plan)
    activations = [d for d in records if d.get("kind", ACTIVATION) == ACTIVATION]
    inputs = [d for d in records if d.get("kind", ACTIVATION) != ACTIVATION]
    parts = [_section("saved activations", activations, top, width, inputs=False)]
    if inputs:
        parts.append(_section("saved parameters and inputs", inputs, top, width, inputs=True))
    return "\n\n".join(parts)


def check_top(top: Any) -> int | None:
    """``top`` as given, or ``ValueError`` saying what it takes."""
    if top is None or (isinstance(top, int) and not isinstance(top, bool) and top > 0):
        return top
    raise ValueError(f"top={top!r} is not valid; give a positive number of rows per table, "
                     "or None for every row")


def _section(title: str, records: list[Mapping[str, Any]], top: int | None, width: int,
             inputs: bool) -> str:
    rows = sorted(records, key=lambda d: -int(d.get("nbytes") or 0))  # stable: graph order on ties
    shown = rows if top is None else rows[:top]
    lines = [f"{title}: {len(rows)} ({nbytes_text(_total(rows))})"
             + (", kept: they outlive the graph" if inputs else "")
             + (", largest first" if len(rows) > 1 and not inputs else "")]
    if not rows:
        return lines[0]
    if inputs:
        headers, caps = ("size", "first read in", "tensor / shape", "reason"), (_SIZE, _WHERE, _TENSOR)
        cells = [_cells(d)[:1] + _cells(d)[2:4] + (_input_reason(d),) for d in shown]
    else:
        headers = ("size", "decision", "module / source line", "tensor / shape", "reason")
        caps, cells = (_SIZE, _DECISION, _WHERE, _TENSOR), [_cells(d) for d in shown]
    lines += _grid(headers, cells, caps, width)
    left = rows[len(shown):]
    if left:
        lines.append(f"... {len(left)} more not shown ({nbytes_text(_total(left))}; top={top})")
    return "\n".join(lines)


def _total(records: list[Mapping[str, Any]]) -> int:
    return sum(int(d.get("nbytes") or 0) for d in records)


def _cells(d: Mapping[str, Any]) -> tuple[str, ...]:
    decision = str(d.get("decision", ""))
    copy = d.get("copy_ms")
    where = "\n".join(x for x in (d.get("module_path") or "", d.get("source_line") or "") if x) or "-"
    name, op = str(d.get("name", "")), _short_op(str(d.get("producer", "")))
    shape = "x".join(map(str, d.get("shape") or ())) or "scalar"
    dtype = _SHORT_DTYPES.get(str(d.get("dtype", "")), str(d.get("dtype", "")))
    reason = str(d.get("reason", "")).removeprefix(f"{decision}: ")
    return (nbytes_text(int(d.get("nbytes") or 0)),
            decision + (f"\n{copy:.3f} ms" if copy is not None else ""),
            where, name + (f" ({op})" if op and not name.startswith(op) else "") + f"\n{shape} {dtype}",
            reason)


def _input_reason(d: Mapping[str, Any]) -> str:
    """A graph input's reason is always the same: said in the section's title."""
    if d.get("producer") == "placeholder":
        return "graph input"
    return str(d.get("reason", "")).removeprefix("keep: ")


def _short_op(producer: str) -> str:
    """``aten.mm.default`` -> ``mm``; a graph input's ``placeholder`` -> ``""``."""
    if producer == "placeholder":
        return ""
    parts = producer.split(".")
    return parts[1] if len(parts) == 3 and parts[0] in ("aten", "prims") else producer


def _grid(headers: tuple[str, ...], rows: list[tuple[str, ...]], caps: tuple[int, ...],
          width: int) -> list[str]:
    """Columns as wide as their widest line (at most ``caps``), the last one (the reason)
    taking what is left of ``width``; cells wrap, the reason after REASON_LINES lines is cut."""
    widths = [min(caps[i], max(len(line) for cell in [headers[i], *(r[i] for r in rows)]
                                for line in cell.split("\n")))
              for i in range(len(headers) - 1)]
    room = max(20, width - sum(widths) - len(_SEP) * (len(headers) - 1))
    widths.append(min(room, max(len(line) for cell in [headers[-1], *(r[-1] for r in rows)]
                                for line in cell.split("\n"))))
    out = [_SEP.join(h.ljust(w) for h, w in zip(headers, widths)).rstrip(),
           _SEP.join("-" * w for w in widths)]
    for row in rows:
        cells = [_wrap(text, w) for text, w in zip(row, widths)]
        if len(cells[-1]) > REASON_LINES:
            cells[-1] = cells[-1][:REASON_LINES]
            cells[-1][-1] = cells[-1][-1][:widths[-1] - 3].rstrip() + "..."
        for i in range(max(map(len, cells))):
            line = [(c[i] if i < len(c) else "") for c in cells]
            line[0] = line[0].rjust(widths[0])  # sizes right-aligned
            out.append(_SEP.join(text.ljust(w) for text, w in zip(line, widths)).rstrip())
    return out


def _wrap(text: str, width: int) -> list[str]:
    """Lines of at most ``width`` characters: words wrap; a longer word (a module path)
    breaks after a dot where it can."""
    out = []
    for paragraph in text.split("\n"):
        words, line = [], ""
        for word in paragraph.split(" "):
            while len(word) > width:
                cut = word.rfind(".", 0, width) + 1 or width
                words.append(word[:cut])
                word = word[cut:]
            words.append(word)
        for word in words:
            if line and len(line) + 1 + len(word) > width:
                out.append(line)
                line = word
            else:
                line = f"{line} {word}" if line else word
        out.append(line)
    return out


def summary_text(plan: GraphPlan) -> str:
    count = {k: 0 for k in ("keep", "offload", "recompute")}
    nbytes = dict(count)
    for d in plan.activations:
        count[d.decision.value] += 1
        nbytes[d.decision.value] += d.nbytes
    lines = [f"graph {plan.graph_id}"]
    for k in ("keep", "offload", "recompute"):
        lines.append(f"  {k:<10} {count[k]:>4} tensors  {nbytes_text(nbytes[k]):>10}")
    if plan.inputs:
        lines.append(f"  {'inputs':<10} {len(plan.inputs):>4} tensors  "
                     f"{nbytes_text(sum(d.nbytes for d in plan.inputs)):>10}  "
                     "(parameters, buffers, model inputs: kept, not counted above)")
    p = plan.predicted
    if p:
        lines.append(f"  activation peak  {nbytes_text(p.activation_peak_bytes):>10} "
                     f"(nothing moved: {nbytes_text(p.baseline_activation_peak_bytes)})")
        if p.step_peak_bytes:
            lines.append(f"  step peak        {nbytes_text(p.step_peak_bytes):>10} "
                         f"(nothing moved: {nbytes_text(p.baseline_step_peak_bytes)}; "
                         "with gradients and temporaries)")
        if p.bw_pool_bytes:
            lines.append(f"  backward without Inductor's buffer pool: it would hold dead buffers at the step "
                         f"peak ({nbytes_text(p.bw_pool_bytes)} more)")
        lines.append(f"  step time        {p.step_ms:7.2f} ms  "
                     f"(nothing moved: {p.baseline_step_ms:.2f} ms; stalls {p.stall_ms:.2f} ms)")
    if plan.note:
        lines.append(f"  note: {plan.note}")
    return "\n".join(lines)


def to_json(obj: Any) -> str:
    return json.dumps(obj, indent=2, default=str)
