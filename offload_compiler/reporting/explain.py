"""``explain`` and ``plan_offline``: trace and plan a model without running it, and report.

    report = offload_compiler.explain(model, input_ids=ids, labels=labels,
                                      options={"memory_budget": 0.5}, top=20)
    print(report)                       # summary and decision table per graph
    report.decisions[0]["decision"]     # "keep", "offload" or "recompute"
    report.predicted["step_ms"]

    # as if on an H100, on a machine without one
    report = offload_compiler.plan_offline(model, x, device="cuda", profile="h100")

Both plan on fake tensors (``offload_compiler/offline.py``): no forward or backward runs,
no weight is read, the model's tensors and the random number generators are left as
they were.
"""

from __future__ import annotations

import inspect
import textwrap
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import torch

from .. import offline
from ..config import OffloadConfig, option_names
from . import tables as fmt
from .records import GraphPlan, Predictions


@dataclass
class GraphReport:
    graph_id: int
    decisions: list[dict[str, Any]]
    """JSON records (``tables.decision_dicts``), in the graph's order, sizes in bytes."""
    predicted: dict[str, float]
    summary: str
    table: str
    """The decision table as printed (``Report.top`` rows per section)."""
    note: str = ""
    peak_holders: list[str] = field(default_factory=list)
    """What the predicted step peak is made of (``GraphPlan.predicted_holders``)."""


@dataclass
class Report:
    """What the backend would do with a model: one entry per compiled graph."""

    graphs: list[GraphReport] = field(default_factory=list)
    top: int | None = None
    """Rows per table section when printed (``None``: every row)."""
    header: str = ""
    """How the plan was made, when not on this machine's own device and profile."""

    @property
    def decisions(self) -> list[dict[str, Any]]:
        """Every graph's decision records, in order."""
        return [d for g in self.graphs for d in g.decisions]

    @property
    def predicted(self) -> dict[str, float]:
        """Predictions summed over graphs (each graph's are in ``graphs[i].predicted``)."""
        return Predictions.summed([g.predicted for g in self.graphs if g.predicted])

    def table(self, top: int | None = None) -> str:
        """Every graph's decision table, at most ``top`` rows per section, each cut short
        with a line saying how many rows were left out and their bytes."""
        top = fmt.check_top(top)
        return "\n\n".join(f"graph {g.graph_id}\n" + fmt.decision_table(g.decisions, top=top)
                           for g in self.graphs)

    def __str__(self) -> str:
        if not self.graphs:
            return ((self.header + "\n") if self.header else "") + (
                "offload_compiler: no graph needed a backward pass; nothing to decide")
        parts = [self.header, ""] if self.header else []
        for g in self.graphs:
            parts += [g.summary, ""]
            if g.peak_holders:
                parts += ["at the predicted step peak:"]
                parts += [textwrap.fill(h, fmt.TABLE_WIDTH, initial_indent="  ", subsequent_indent="    ")
                          for h in g.peak_holders] + [""]
            parts += [g.table, ""]
        return "\n".join(parts).rstrip()


def report_of(plans: list[GraphPlan], top: int | None = None, header: str = "") -> Report:
    top = fmt.check_top(top)
    return Report([GraphReport(p.graph_id, fmt.decision_dicts(p), p.predicted.as_dict() if p.predicted else {},
                               fmt.summary_text(p), fmt.decision_table(p, top=top), p.note,
                               p.predicted_holders(top or 10)) for p in plans],
                  top=top, header=header)


def explain(model: torch.nn.Module, *args: Any, options: Mapping[str, Any] | None = None,
            top: int | None = None, **kwargs: Any) -> Report:
    """What the offload backend (``options`` as for ``torch.compile(..., options=...)``)
    decides for ``model(*args, **kwargs)``, planned without running the model.

    The model is traced and planned on fake tensors of its own devices (shapes and
    dtypes, no data): no forward or backward runs, no weight is read, and the model's
    parameters, buffers and the random number generators are left as they were.
    ``top``: at most that many rows per table section in the printed report (the records
    in ``report.decisions`` are all there). Keyword arguments other than ``options`` and
    ``top`` go to the model (``input_ids=``, ``labels=``).

    Earlier releases took options as keywords (``explain(model, x, memory_budget=0.5)``);
    such a keyword, when the model's ``forward`` takes no keyword of that name, is still
    read as an option, with a ``FutureWarning``. One the ``forward`` also takes raises
    ``TypeError``: say which it is with ``options={...}``.
    """
    options, kwargs = _split_options(model, options, kwargs)
    config = OffloadConfig.from_options(options)  # ValueError naming the valid options
    top = fmt.check_top(top)
    return report_of(offline.trace_and_plan(model, args, kwargs, config), top)


def plan_offline(model: torch.nn.Module, *args: Any, device: str | torch.device = "cuda",
                 profile: str | Path | Mapping[str, Any] | None = None,
                 options: Mapping[str, Any] | None = None, top: int | None = None,
                 **kwargs: Any) -> Report:
    """What the offload backend would decide for ``model(*args, **kwargs)`` on ``device``
    (``"cuda"`` or ``"cpu"``) with the hardware ``profile``, planned on fake tensors of that
    device without running the model (as :func:`explain`).

    ``profile``: a name (``"h100"``, ``offline.PROFILES``), a JSON file of profile fields
    (a calibrated ``~/.cache/offload_compiler/hardware-*.json``), or a dict; ``None``: the
    device's own (calibrated on this machine's GPU; the fixed CPU profile). ``device="cuda"``
    on a machine without CUDA plans in loopback on the CPU (``devices=("cpu",)``) with
    ``profile`` (default ``"h100"``), and the report's first line says so. The model may
    be built on the meta device (``with torch.device("meta"):``): nothing is allocated.
    """
    target, loopback = offline.resolve_device(device)
    requested = torch.device(device).type
    options = dict(options or {})
    if profile is None and loopback:
        profile = "h100"
    if profile is not None:
        if "hardware" in options:
            raise ValueError("give the hardware figures either as profile= or as options['hardware'], not both")
        options["hardware"] = offline.load_profile(profile)
    if loopback:
        devices = options.get("devices", ("cuda",))
        options["devices"] = tuple("cpu" if str(d).split(":")[0] == "cuda" else d
                                   for d in ((devices,) if isinstance(devices, str) else devices))
    config = OffloadConfig.from_options(options)
    top = fmt.check_top(top)
    given = (f"the {profile} profile" if isinstance(profile, (str, Path)) else
             "the given profile" if profile is not None else "the device's own profile")
    header = (f"planned for {requested} on the CPU (no CUDA here): loopback, with {given}; attention "
              "is the CPU kernel, costed as the CUDA one" if loopback else
              f"planned for {requested} on this machine, with {given}")
    header = "\n".join(textwrap.wrap(header, fmt.TABLE_WIDTH))
    plans = offline.trace_and_plan(model, args, kwargs, config, device=target)
    return report_of(plans, top, header=header)


def _split_options(model: torch.nn.Module, options: Mapping[str, Any] | None,
                   kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(options, model keyword inputs)``: keywords named like an option that the
    model's ``forward`` does not take are options (with a ``FutureWarning``)."""
    if options is not None and not isinstance(options, Mapping):
        raise TypeError(f"options={options!r} is not valid; give a dict, e.g. options={{'memory_budget': 0.5}}")
    options = dict(options or {})
    named = [k for k in kwargs if k in option_names()]
    if not named:
        return options, kwargs
    takes, any_keyword = _forward_keywords(model)
    clash = [k for k in named if k in takes or any_keyword]
    if clash:
        k = clash[0]
        how = f"a keyword {k!r}" if k in takes else "**kwargs"
        raise TypeError(
            f"explain: {k}= could be an option or an input of the model (its forward takes {how}); "
            f"pass options as explain(model, ..., options={{{k!r}: ...}}) and model inputs as keywords")
    both = [k for k in named if k in options]
    if both:
        raise TypeError(f"explain: {', '.join(map(repr, both))} given both in options= and as a keyword")
    warnings.warn(
        f"explain: options as keywords ({', '.join(f'{k}=' for k in named)}) are deprecated and will be "
        f"read as model inputs in a later release; pass options={{{', '.join(f'{k!r}: ...' for k in named)}}}",
        FutureWarning, stacklevel=3)
    options.update({k: kwargs[k] for k in named})
    return options, {k: v for k, v in kwargs.items() if k not in named}


def _forward_keywords(model: torch.nn.Module) -> tuple[set[str], bool]:
    """``(names forward takes by keyword, whether it takes **kwargs)``; a signature that
    cannot be read counts as taking any keyword."""
    try:
        params = inspect.signature(model.forward).parameters.values()
    except (TypeError, ValueError):
        return set(), True
    names = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return names, any(p.kind is p.VAR_KEYWORD for p in params)
