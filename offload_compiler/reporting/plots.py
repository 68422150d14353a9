"""Plots, drawn with matplotlib: an optional extra (``pip install "offload_compiler[plots]"``).

- :func:`memory_figure`: one graph's activation memory over the simulated step (the plan
  and nothing moved), the budget, where backward begins, and a measured curve if given.
- :func:`compare_figure`: the comparison harness's strategies, step time against
  measured activation memory with the Pareto frontier; a bar chart of step time where
  no memory was measured (CPU).

Each returns a ``matplotlib.figure.Figure`` (read its axes back in tests) and
:func:`save` writes it. Figures are built on matplotlib's Agg canvas directly, never
through ``pyplot``: the user's backend and pyplot's figures are left alone.

Without matplotlib, these functions raise :class:`PlotsUnavailable` (the user asked for
a plot); dumps and ``compare`` call :func:`save_or_warn`, which logs one WARNING per
process and goes on without the plot.
"""

from __future__ import annotations

import importlib
import logging
import threading
from pathlib import Path
from typing import Any, Callable, Iterable

from .records import GraphPlan
from ..nbytes import nbytes_text

log = logging.getLogger(__name__)

DPI = 120
INSTALL = 'pip install "offload_compiler[plots]" (or pip install matplotlib)'
PLAN_COLOR, BASE_COLOR, MEASURED_COLOR, FRONT_COLOR = "#d62728", "#1f77b4", "#2ca02c", "#d62728"

_warned = False
_lock = threading.Lock()


class PlotsUnavailable(ImportError):
    """matplotlib is not installed."""


def _new_figure(width: float, height: float) -> Any:
    """A figure on its own Agg canvas (no pyplot, no global backend)."""
    try:
        importlib.import_module("matplotlib")  # first: a missing package fails here, not a cached submodule
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as error:
        raise PlotsUnavailable(f"plots need matplotlib, which is not installed ({error}): {INSTALL}") from None
    fig = Figure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def save(fig: Any, path: str | Path) -> Path:
    """Write ``fig`` to ``path`` (format from the suffix: ``.png``, ``.svg``, ``.pdf``)."""
    path = Path(path)
    fig.savefig(path, dpi=fig.dpi)  # the dpi labels were placed at
    return path


def save_or_warn(make: Callable[[], Any], path: str | Path, what: str) -> bool:
    """``save(make(), path)``; without matplotlib, one WARNING per process (naming
    ``what`` was not drawn) and ``False``. Other errors propagate."""
    global _warned
    try:
        fig = make()
    except PlotsUnavailable as error:
        with _lock:
            first, _warned = not _warned, True
        if first:
            log.warning("offload: %s not drawn: %s. Said once.", what, error)
        return False
    save(fig, path)
    return True


# ---- memory over time --------------------------------------------------------------

def memory_figure(plan: GraphPlan, *, config: Any = None,
                  measured_memory: list[tuple[float, int]] | None = None) -> Any:
    """Activation memory over the simulated step of ``plan``: the plan and nothing moved
    (predicted), ``measured_memory`` (``(ms, bytes)`` from the step's start) if given,
    the budget in bytes where the plan had one, and the forward/backward boundary.
    ``config`` (the ``OffloadConfig``) only words the title when there is no byte budget."""
    fig = _new_figure(9, 4.8)
    ax = fig.add_subplot()
    sim, base = plan.simulation, plan.baseline_simulation
    budget = plan.predicted.budget_bytes if plan.predicted is not None else -1
    measured = [(float(t), int(b)) for t, b in (measured_memory or [])]
    curves = [(label, s.memory, s.step_ms, color) for label, s, color in (
        ("nothing moved (predicted)", base, BASE_COLOR), ("plan (predicted)", sim, PLAN_COLOR))
        if s is not None]
    top = max([m for _, pts, _, _ in curves for _, m in pts] + [b for _, b in measured] + [budget, 1])
    unit, scale = _unit(top)
    for label, points, end_ms, color in curves:
        ts = [0.0] + [t for t, _ in points] + [end_ms]
        ms = [0] + [m for _, m in points] + [points[-1][1] if points else 0]
        ax.step(ts, [m / scale for m in ms], where="post", color=color, lw=1.4, label=label)
    if measured:
        ax.plot([t for t, _ in measured], [b / scale for _, b in measured], color=MEASURED_COLOR,
                lw=1.4, label="measured")
    if budget >= 0:
        ax.axhline(budget / scale, color="black", ls="--", lw=1, label=f"budget {nbytes_text(budget)}")
    if sim is not None:
        ax.axvline(sim.fw_ms, color="gray", ls=":", lw=1.2, label="forward | backward")
        ax.annotate("forward ", (sim.fw_ms, 1), xycoords=("data", "axes fraction"), ha="right",
                    va="top", fontsize=8, color="gray")
        ax.annotate(" backward", (sim.fw_ms, 1), xycoords=("data", "axes fraction"), ha="left",
                    va="top", fontsize=8, color="gray")
    else:
        ax.text(0.5, 0.5, "nothing simulated for this graph\n(no activation on an offload device)",
                transform=ax.transAxes, ha="center", va="center", color="gray")
    ax.set_xlabel("time in the step (ms)" + ("; simulated" if not measured else "; simulated and measured"))
    ax.set_ylabel(f"activation memory ({unit})")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0, top=top / scale * 1.12)
    ax.grid(True, alpha=0.3)
    ax.set_title(_memory_title(plan, budget, config), fontsize=10)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper right", fontsize=8)
    fig.subplots_adjust(left=0.09, right=0.98, bottom=0.12, top=0.86)
    return fig


def _memory_title(plan: GraphPlan, budget: int, config: Any) -> str:
    if budget >= 0:
        bound = f"budget {nbytes_text(budget)}"
    elif config is not None and getattr(config, "policy", "cost_model") != "cost_model":
        bound = f'policy="{config.policy}", no budget'
    elif config is not None:
        bound = 'memory_budget="auto"'
    else:
        bound = "no budget in bytes"
    line = f"graph {plan.graph_id}: activation memory over the step, {bound}"
    if plan.predicted is not None:
        p = plan.predicted
        line += (f"\npredicted peak {nbytes_text(p.activation_peak_bytes)} (nothing moved: "
                 f"{nbytes_text(p.baseline_activation_peak_bytes)}), step {p.step_ms:.2f} ms "
                 f"(nothing moved: {p.baseline_step_ms:.2f} ms)")
    return line


def _unit(nbytes: float) -> tuple[str, int]:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20)):
        if nbytes >= scale:
            return unit, scale
    return "KiB", 2**10


# ---- the comparison ------------------------------------------------------------------

def compare_figure(rows: Iterable[Any], *, meta: dict[str, Any], frontier: set[str]) -> Any:
    """The comparison's rows (``compare.Row``: ``strategy``, ``status``, ``step_ms``,
    ``activation_gib``). Rows with measured activation memory: step time against it,
    ``frontier`` (the Pareto frontier, computed on measured memory) filled and joined.
    Where no row has memory measured (CPU): a bar chart of step time, titled so.
    ``meta``: ``model`` or ``preset``, ``device``, ``gpu``, ``torch``, ``dtype``."""
    ok = [r for r in rows if r.status == "ok" and r.step_ms is not None]
    measured = [r for r in ok if r.activation_gib is not None]
    fig = _new_figure(9, 5.6 if measured else max(3.0, 1.2 + 0.35 * len(ok)))
    ax = fig.add_subplot()
    head = _compare_head(meta)
    if measured:
        _pareto_axes(fig, ax, measured, frontier)
        ax.set_title(f"{head}\nmedian step time against activation memory; Pareto frontier in red",
                     fontsize=10)
        unplotted = [r.strategy for r in ok if r.activation_gib is None]
        if unplotted:
            fig.text(0.01, 0.01, "not plotted (no memory measured): " + ", ".join(unplotted), fontsize=8)
    elif ok:
        names = [r.strategy for r in ok]
        bars = ax.barh(range(len(ok)), [r.step_ms for r in ok], color="#7f7f7f")
        ax.set_yticks(range(len(ok)), names)
        ax.invert_yaxis()
        ax.bar_label(bars, fmt="%.1f ms", padding=3, fontsize=8)
        ax.set_xlim(0, max(r.step_ms for r in ok) * 1.18)
        ax.set_xlabel("median step time (ms)")
        ax.set_ylabel("strategy")
        ax.set_title(f"{head}\nmedian step time; no activation memory measured on "
                     f"{meta.get('device', '?')}, so no memory axis and no Pareto frontier", fontsize=10)
    else:
        ax.set_axis_off()
        ax.set_title(head, fontsize=10)
        ax.text(0.5, 0.5, "no strategy finished: nothing to plot", ha="center", va="center")
    fig.subplots_adjust(left=0.16 if not measured else 0.09, right=0.97,
                        bottom=0.1 if measured else 0.15, top=0.86 if measured else 0.8)
    if measured:
        _place_labels(fig, ax, [(r.activation_gib, r.step_ms, r.strategy) for r in measured])
    return fig


def _compare_head(meta: dict[str, Any]) -> str:
    model = meta.get("model") or (f"example GPT, preset {meta['preset']}" if meta.get("preset") else "model ?")
    device = meta.get("device", "?")
    if meta.get("gpu"):
        device = f"{device} ({meta['gpu']})"
    dtype = f", {meta['dtype']}" if meta.get("dtype") else ""
    return f"{model} on {device}{dtype}, torch {meta.get('torch', '?')}"


def _pareto_axes(fig: Any, ax: Any, rows: list[Any], frontier: set[str]) -> None:
    on = sorted((r for r in rows if r.strategy in frontier), key=lambda r: r.activation_gib)
    off = [r for r in rows if r.strategy not in frontier]
    if off:
        ax.scatter([r.activation_gib for r in off], [r.step_ms for r in off], s=36,
                   facecolors="white", edgecolors=FRONT_COLOR, zorder=3, label="dominated")
    if on:
        ax.plot([r.activation_gib for r in on], [r.step_ms for r in on], color=FRONT_COLOR,
                lw=1, drawstyle="steps-post", zorder=2)
        ax.scatter([r.activation_gib for r in on], [r.step_ms for r in on], s=36, color=FRONT_COLOR,
                   zorder=4, label="Pareto frontier")
    xs, ys = [r.activation_gib for r in rows], [r.step_ms for r in rows]
    ax.set_xlim(0, max(xs) * 1.3 or 1.0)
    span = (max(ys) - min(ys)) or max(ys) * 0.1 or 1.0
    ax.set_ylim(max(0.0, min(ys) - 0.25 * span), max(ys) + 0.25 * span)
    ax.set_xlabel("activation memory (GiB, measured: peak minus memory held before forward)")
    ax.set_ylabel("median step time (ms)")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper right", fontsize=8)


_LEADER = {"arrowstyle": "-", "lw": 0.5, "color": "gray", "shrinkA": 0, "shrinkB": 3}
#: Offsets (points) tried in turn for a point's label; past them, further out.
_OFFSETS = [(7, 5), (7, -12), (-7, 5), (-7, -12), (7, 16), (7, -23), (-7, 16), (-7, -23)]


def _place_labels(fig: Any, ax: Any, points: list[tuple[float, float, str]]) -> list[Any]:
    """Annotate each point with its name where the text overlaps no other label, marker
    or the legend, trying offsets in turn, then further out; a leader line joins each
    label to its point."""
    from matplotlib.text import Text

    renderer = fig.canvas.get_renderer()
    taken = [_marker_box(ax, x, y) for x, y, _ in points]
    legend = ax.get_legend()
    if legend is not None:
        taken.append(legend.get_window_extent(renderer))
    axes_box = ax.get_window_extent(renderer)
    offsets = _OFFSETS + [(sx * 10, sy * (30 + 11 * k)) for k in range(12) for sx in (1, -1)
                          for sy in (1, -1)]
    placed = []
    for x, y, name in sorted(points, key=lambda p: (-p[1], p[0])):
        for i, (dx, dy) in enumerate(offsets):
            text = ax.annotate(name, (x, y), xytext=(dx, dy), textcoords="offset points", fontsize=8,
                               ha="left" if dx > 0 else "right", va="bottom" if dy > 0 else "top",
                               arrowprops=_LEADER)
            text.update_positions(renderer)
            box = Text.get_window_extent(text, renderer)  # the text alone, not its leader line
            inside = axes_box.x0 <= box.x0 and box.x1 <= axes_box.x1 and axes_box.y0 <= box.y0 and box.y1 <= axes_box.y1
            if inside and not any(box.overlaps(t) for t in taken):
                break
            if i < len(offsets) - 1:
                text.remove()
        taken.append(box)
        placed.append(text)
    return placed


def _marker_box(ax: Any, x: float, y: float) -> Any:
    from matplotlib.transforms import Bbox

    px, py = ax.transData.transform((x, y))
    return Bbox.from_extents(px - 4, py - 4, px + 4, py + 4)
