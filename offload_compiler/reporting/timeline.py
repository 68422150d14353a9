"""The simulated schedule as pictures: a Chrome trace (Perfetto) and a memory plot.

:func:`chrome_trace` gives one thread per lane (compute, D2H, H2D) and counter tracks
for activation memory; :func:`memory_svg` draws activation memory over the simulated
step, nothing moved against the plan.
"""

from __future__ import annotations

from typing import Any

from .records import GraphPlan

LANES = ("compute", "d2h", "h2d")


def chrome_trace(plan: GraphPlan) -> dict[str, Any]:
    """The simulated schedule in the Chrome trace event format (Perfetto, chrome://tracing):
    one thread per lane (compute, d2h, h2d) and counter tracks for activation memory."""
    pid = plan.graph_id
    events: list[dict[str, Any]] = [{"ph": "M", "pid": pid, "name": "process_name",
                                     "args": {"name": f"offload plan, graph {plan.graph_id}"}}]
    for tid, lane in enumerate(LANES):
        events.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": lane}})
    sim = plan.simulation
    if sim is not None:
        for lane, label, start, end in sim.events:
            events.append({"ph": "X", "pid": pid, "tid": LANES.index(lane), "name": label,
                           "cat": lane, "ts": start * 1e3, "dur": max(end - start, 0.0) * 1e3})
        for t, held in sim.memory:
            events.append({"ph": "C", "pid": pid, "name": "activation memory (plan)",
                           "ts": t * 1e3, "args": {"MiB": held / 2**20}})
    base = plan.baseline_simulation
    if base is not None:
        for t, held in base.memory:
            events.append({"ph": "C", "pid": pid, "name": "activation memory (nothing moved)",
                           "ts": t * 1e3, "args": {"MiB": held / 2**20}})
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def memory_svg(plan: GraphPlan, width: int = 720, height: int = 360) -> str:
    """Activation memory over the simulated step: nothing moved against the plan."""
    curves = []
    for label, sim, color in (("nothing moved", plan.baseline_simulation, "#1f77b4"),
                              ("plan", plan.simulation, "#d62728")):
        if sim is not None and sim.memory:
            curves.append((label, sim.memory + [(sim.step_ms, 0)], color))
    t_max = max((c[1][-1][0] for c in curves), default=1.0) or 1.0
    m_max = max((m for c in curves for _, m in c[1]), default=1) or 1
    pad = 60

    def sx(t): return pad + t / t_max * (width - 2 * pad)
    def sy(m): return height - pad - m / m_max * (height - 2 * pad)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="11">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" stroke="black"/>',
           f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{height - pad}" stroke="black"/>',
           f'<text x="{width / 2}" y="{height - 20}" text-anchor="middle">simulated time (ms), '
           f'0 to {t_max:.2f}</text>',
           f'<text x="15" y="{height / 2}" transform="rotate(-90 15 {height / 2})" '
           f'text-anchor="middle">activation memory, up to {m_max / 2**20:.1f} MiB</text>']
    for i, (label, pts, color) in enumerate(curves):
        path, held = [], 0
        for t, m in pts:  # a step function
            path.append(f"{sx(t):.1f},{sy(held):.1f}")
            path.append(f"{sx(t):.1f},{sy(m):.1f}")
            held = m
        out.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{" ".join(path)}"/>')
        out.append(f'<text x="{width - pad - 120}" y="{pad + 15 * i}" fill="{color}">{label}</text>')
    out.append("</svg>")
    return "\n".join(out)
