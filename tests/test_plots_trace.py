"""Plots (matplotlib, read back from the Figure objects), the Perfetto timeline and the
TORCH_TRACE artifacts."""

import dataclasses
import itertools
import json
import logging
import pickle
import sys
from unittest import mock

import pytest

from offload_compiler.nbytes import nbytes_text
import torch

import offload_compiler
from offload_compiler.compare import Row, harness, pareto
from offload_compiler.decision import KEEP, OFFLOAD, RECOMPUTE
from offload_compiler.models.gpt import GPT, make_batch, preset
from offload_compiler.planning.simulator import Lanes, SimTensor, simulate
from offload_compiler.reporting import plots, timeline
from helpers import backend, loopback

MB = 2**20


@pytest.fixture(scope="module")
def plan():
    """The tiny GPT planned at a budget of 0.3: offloads, recomputations and a budget in bytes."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    cfg = preset("tiny")
    model, (idx, tgt) = GPT(cfg), make_batch(cfg)
    b = backend(**loopback(policy="cost_model", inner_compiler="eager", memory_budget=0.3,
                           plan_cache=False))  # planned here: names read off the FX nodes
    torch.compile(model, backend=b)(idx, tgt).backward()
    torch._dynamo.reset()
    (p,) = b.plans
    assert p.offloaded and p.recomputed and p.predicted.budget_bytes > 0
    return p


def _events(trace, ph, pid=None):
    return [e for e in trace["traceEvents"] if e["ph"] == ph and (pid is None or e["pid"] == pid)]


# ---- the simulator carries what each event is ---------------------------------------

def test_simulated_events_carry_op_indices_and_tensor_names():
    ts = [SimTensor("A", MB, produced=0, last_fw_use=0, first_bw_use=1, last_bw_use=1, decision=OFFLOAD),
          SimTensor("B", MB, produced=1, last_fw_use=1, first_bw_use=2, last_bw_use=2,
                    decision=RECOMPUTE, recompute_ms=0.5),
          SimTensor("C", MB, produced=1, last_fw_use=2, first_bw_use=0, last_bw_use=0, decision=KEEP)]
    r = simulate([1.0, 1.0, 1.0], [1.0, 1.0, 1.0], ts, Lanes(1.0, 1.0), record=True)
    by_lane = {lane: [(op, tensor) for ln, op, tensor, _, _ in r.events if ln == lane] for lane in ("d2h", "h2d")}
    assert by_lane == {"d2h": [(0, "A")], "h2d": [(3 + r.reload_before["A"], "A")]}
    compute = [(op, tensor) for lane, op, tensor, _, _ in r.events if lane == "compute"]
    assert [op for op, tensor in compute if not tensor] == [0, 1, 2, 3, 4, 5]
    assert (3 + 2, "B") in compute  # recomputed right before backward op 2
    assert r.origins is None  # the simulator names nothing; the planner attaches origins


def test_backward_nodes_get_the_module_of_their_forward_op():
    import torch.fx as fx

    from passes.provenance import module_path

    g = fx.Graph()
    n = g.placeholder("x")
    n.meta["fwd_nn_module_stack"] = {"a": ("L['self'].blocks.0.attn.qkv", object)}
    assert module_path(n) == "blocks.0.attn.qkv"


# ---- the Perfetto timeline ----------------------------------------------------------

def test_slices_are_named_by_op_and_module_with_arguments(plan):
    trace = timeline.chrome_trace(plan)
    slices = [e for e in _events(trace, "X", plan.graph_id) if e["cat"] in timeline.LANES]
    names = {e["name"] for e in slices}
    assert "mm · blocks.0.attn.qkv" in names and "addmm · blocks.1.mlp.up" in names
    assert not any(n.startswith(("fw ", "bw ")) for n in names)
    fw_ms = plan.simulation.fw_ms
    backward = [e for e in slices if e["cat"] == "compute" and e["ts"] >= fw_ms * 1e3]
    gradients = [e["name"] for e in backward if "_backward" in e["args"]["op"]]
    assert "native_layer_norm_backward · blocks.1.ln1" in gradients  # named by their forward op's module
    for e in slices:
        args = e["args"]
        assert {"node", "op", "module", "source", "bytes", "nbytes"} <= set(args), e
        assert args["bytes"].endswith(("B", "KiB", "MiB", "GiB"))
    decided = {d.name: d.decision.value for d in plan.decisions}
    for e in slices:
        if e["cat"] in ("d2h", "h2d"):
            assert e["name"].startswith(e["cat"] + " ") and " · " in e["name"]
            assert e["args"]["decision"] == "offload" and decided[e["args"]["tensor"]] == "offload"
        elif e["args"]["node"] in decided and "tensor" not in e["args"]:
            assert e["args"]["decision"] == decided[e["args"]["node"]]
    recomputed = [e for e in slices if e["name"].startswith("recompute ")]
    assert recomputed and all(e["args"]["decision"] == "recompute" for e in recomputed)
    assert any(".py:" in e["args"]["source"] for e in slices)


def test_flow_events_join_every_d2h_to_its_h2d(plan):
    trace = timeline.chrome_trace(plan)
    slices = _events(trace, "X", plan.graph_id)
    copies = {lane: {e["args"]["tensor"]: e for e in slices if e["cat"] == lane} for lane in ("d2h", "h2d")}
    assert set(copies["d2h"]) == set(copies["h2d"]) == {d.name for d in plan.offloaded}
    starts, ends = _events(trace, "s"), _events(trace, "f")
    assert len(starts) == len(ends) == len(plan.offloaded)
    by_id = {e["id"]: e for e in starts}
    assert len(by_id) == len(starts)
    for end in ends:
        start = by_id[end["id"]]
        assert end["bp"] == "e" and start["cat"] == end["cat"] and start["name"] == end["name"]
        tensor = start["name"].removeprefix("offload ")
        d2h, h2d = copies["d2h"][tensor], copies["h2d"][tensor]
        # each end lies inside the slice it binds to, on that slice's track
        assert (start["tid"], end["tid"]) == (d2h["tid"], h2d["tid"])
        assert d2h["ts"] <= start["ts"] <= d2h["ts"] + d2h["dur"]
        assert h2d["ts"] <= end["ts"] <= h2d["ts"] + h2d["dur"]


def test_forward_backward_marker_and_budget_counter(plan):
    trace = timeline.chrome_trace(plan)
    fw_us = plan.simulation.fw_ms * 1e3
    (marker,) = _events(trace, "i")
    assert marker["name"] == "backward begins" and marker["ts"] == pytest.approx(fw_us)
    phases = {e["name"]: e for e in _events(trace, "X") if e["cat"] == "phase"}
    assert phases["forward"]["dur"] == pytest.approx(fw_us) and phases["backward"]["ts"] == pytest.approx(fw_us)
    counters = {e["name"] for e in _events(trace, "C")}
    assert {"activation memory (plan)", "activation memory (nothing moved)", "activation budget"} <= counters
    budget = [e["args"]["MiB"] for e in _events(trace, "C") if e["name"] == "activation budget"]
    assert budget and set(budget) == {plan.predicted.budget_bytes / MB}


def test_no_budget_counter_without_a_byte_budget(plan):
    auto = dataclasses.replace(plan, predicted=dataclasses.replace(plan.predicted, budget_bytes=-1))
    assert "activation budget" not in {e["name"] for e in _events(timeline.chrome_trace(auto), "C")}


MEASURED = [{"lane": "compute", "name": "triton_poi_fused_0", "start_ms": 0.0, "dur_ms": 0.2, "args": {"grid": 4}},
            {"lane": "d2h", "name": "d2h view", "start_ms": 0.1, "dur_ms": 0.3, "args": {}},
            {"lane": "h2d", "name": "h2d view", "start_ms": 1.0, "dur_ms": 0.3}]


def test_measured_schedule_is_a_process_beside_the_prediction(plan):
    assert not any(e["pid"] != plan.graph_id for e in timeline.chrome_trace(plan)["traceEvents"])
    trace = timeline.chrome_trace(plan, measured_events=MEASURED, measured_memory=[(0.0, 0), (0.5, 3 * MB)])
    pid = timeline.MEASURED_PID + plan.graph_id
    (name,) = [e["args"]["name"] for e in _events(trace, "M", pid) if e["name"] == "process_name"]
    assert name == f"measured, graph {plan.graph_id}"
    threads = {e["tid"]: e["args"]["name"] for e in _events(trace, "M", pid) if e["name"] == "thread_name"}
    assert threads == {0: "compute (measured)", 1: "d2h (measured)", 2: "h2d (measured)"}
    slices = _events(trace, "X", pid)
    assert [(e["name"], e["tid"], e["ts"], e["dur"]) for e in slices] == [
        ("triton_poi_fused_0", 0, 0.0, 200.0), ("d2h view", 1, 100.0, 300.0), ("h2d view", 2, 1000.0, 300.0)]
    assert slices[0]["args"] == {"grid": 4}
    assert [e["args"]["MiB"] for e in _events(trace, "C", pid)] == [0.0, 3.0]
    assert _events(trace, "X", plan.graph_id)  # the prediction is still there


def test_bad_measurements_are_refused_with_the_valid_values(plan):
    with pytest.raises(ValueError, match=r"lane 'gpu'; valid lanes are \('compute', 'd2h', 'h2d'\)"):
        timeline.chrome_trace(plan, measured_events=[{**MEASURED[0], "lane": "gpu"}])
    with pytest.raises(ValueError, match="lacks \\['dur_ms'\\]"):
        timeline.chrome_trace(plan, measured_events=[{"lane": "d2h", "name": "x", "start_ms": 0}])
    with pytest.raises(ValueError, match=r"\(ms, bytes\)"):
        timeline.chrome_trace(plan, measured_memory=[(0.0, 1, 2)])


def test_names_survive_the_plan_cache_pickle(plan):
    assert plan.simulation.origins._fw[0] is not None  # still the FX nodes, named lazily
    cached = pickle.loads(pickle.dumps(plan.simulation))
    again = dataclasses.replace(plan, simulation=cached)
    assert timeline.chrome_trace(again) == timeline.chrome_trace(plan)
    twice = dataclasses.replace(plan, simulation=pickle.loads(pickle.dumps(cached)))
    assert timeline.chrome_trace(twice) == timeline.chrome_trace(plan)


def test_trace_json_is_one_event_per_line(plan):
    trace = timeline.chrome_trace(plan)
    text = timeline.trace_json(trace)
    assert json.loads(text) == trace
    assert len(text.splitlines()) == len(trace["traceEvents"]) + 2


def test_plan_and_timeline_are_torch_trace_artifacts():
    from models import NormGeluMLP

    with mock.patch("torch._logging.trace_structured") as traced:
        b = backend(**loopback(inner_compiler="eager", policy="cost_model"))
        torch.compile(NormGeluMLP(), backend=b)(torch.randn(8, 32)).backward()
    artifacts = {c.kwargs["metadata_fn"]()["name"]: c.kwargs for c in traced.call_args_list
                 if c.args and c.args[0] == "artifact"}
    graph_id = b.plans[0].graph_id
    plan_art, timeline_art = (artifacts[f"offload_{kind}_graph_{graph_id}"] for kind in ("plan", "timeline"))
    assert timeline_art["metadata_fn"]()["encoding"] == "json"
    events = json.loads(timeline_art["payload_fn"]())["traceEvents"]
    assert {e["ph"] for e in events} >= {"M", "X", "C", "s", "f", "i"}
    assert json.loads(plan_art["payload_fn"]())["decisions"]


# ---- memory over time ---------------------------------------------------------------

def _lines(ax):
    return {line.get_label(): line for line in ax.get_lines()}


def test_memory_plot_has_budget_boundary_units_title_and_measured_curve(plan, tmp_path):
    measured = [(0.0, 0), (0.4, 500_000), (0.9, 800_000), (1.5, 0)]
    fig = plots.memory_figure(plan, measured_memory=measured)
    (ax,) = fig.axes
    title = ax.get_title()
    budget = plan.predicted.budget_bytes
    assert f"graph {plan.graph_id}" in title and f"budget {nbytes_text(budget)}" in title
    assert ax.get_xlabel().startswith("time in the step (ms)")
    assert ax.get_ylabel() == "activation memory (MiB)"
    lines = _lines(ax)
    assert set(lines) >= {"plan (predicted)", "nothing moved (predicted)", "measured",
                          f"budget {nbytes_text(budget)}", "forward | backward"}
    assert list(lines[f"budget {nbytes_text(budget)}"].get_ydata()) == [budget / MB] * 2
    assert list(lines["forward | backward"].get_xdata()) == [plan.simulation.fw_ms] * 2
    assert list(lines["measured"].get_ydata()) == [b / MB for _, b in measured]
    assert max(lines["plan (predicted)"].get_ydata()) == pytest.approx(plan.predicted.activation_peak_bytes / MB)
    assert len(ax.get_xticks()) > 2 and len(ax.get_yticks()) > 2
    path = plots.save(fig, tmp_path / "memory.png")
    assert path.read_bytes().startswith(b"\x89PNG")


def test_memory_plot_without_a_byte_budget_says_why(plan):
    auto = dataclasses.replace(plan, predicted=dataclasses.replace(plan.predicted, budget_bytes=-1))
    config = offload_compiler.OffloadConfig(memory_budget="auto")
    (ax,) = plots.memory_figure(auto, config=config).axes
    assert 'memory_budget="auto"' in ax.get_title()
    assert not any(label.startswith("budget") for label in _lines(ax))
    policy_all = offload_compiler.OffloadConfig(policy="all")
    assert 'policy="all", no budget' in plots.memory_figure(auto, config=policy_all).axes[0].get_title()


def test_a_graph_with_nothing_simulated_still_plots_and_traces():
    from offload_compiler.reporting.records import GraphPlan

    empty = GraphPlan(graph_id=7, off_device=True)
    (ax,) = plots.memory_figure(empty).axes
    assert "graph 7" in ax.get_title() and not ax.get_lines()
    assert any("nothing simulated" in t.get_text() for t in ax.texts)
    assert {e["ph"] for e in timeline.chrome_trace(empty)["traceEvents"]} == {"M"}


def test_dump_writes_memory_png_and_a_titled_timeline(tmp_path):
    from models import NormGeluMLP

    b = backend(**loopback(inner_compiler="eager", policy="cost_model", dump_dir=str(tmp_path)))
    torch.compile(NormGeluMLP(), backend=b)(torch.randn(8, 32)).backward()
    folder = tmp_path / "graph_000"
    assert (folder / "memory.png").read_bytes().startswith(b"\x89PNG")
    assert not (folder / "memory.svg").exists()
    trace = json.loads((folder / "timeline.json").read_text())
    (name,) = [e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "process_name"]
    assert name == f"offload plan, graph {b.plans[0].graph_id} (dump folder graph_000)"


# ---- the comparison -----------------------------------------------------------------

META = {"torch": torch.__version__, "device": "cuda", "gpu": "NVIDIA H100 80GB HBM3",
        "dtype": "bfloat16", "preset": "h100", "model": None}


def _rows():
    spec = [("eager", 100, 3.0), ("inductor", 80, 2.9), ("full_ac", 110, 0.8), ("sac", 90, 1.6),
            ("budget:0.5", 88, 1.5), ("budget:0.2", 96, 0.95), ("offload:auto", 82, 1.55),
            ("offload:0.5", 83, 1.5), ("offload:0.2", 97, 0.9)]
    return [Row(name, step_ms=float(ms), activation_gib=gib) for name, ms, gib in spec] + [
        Row("torch_offload", status="unsupported")]


def _no_overlap(fig, ax):
    from matplotlib.text import Text

    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = [Text.get_window_extent(t, renderer) for t in ax.texts]
    for a, b in itertools.combinations(boxes, 2):
        assert not a.overlaps(b), (a, b)
    return boxes


def test_pareto_plot_axes_title_frontier_and_labels_apart():
    rows = _rows()
    front = pareto(rows)
    assert front == {"full_ac", "offload:0.2", "budget:0.2", "offload:0.5", "offload:auto", "inductor"}
    fig = plots.compare_figure(rows, meta=META, frontier=front)
    (ax,) = fig.axes
    assert ax.get_xlabel().startswith("activation memory (GiB")
    assert ax.get_ylabel() == "median step time (ms)"
    title = ax.get_title()
    for part in ("example GPT, preset h100", "cuda (NVIDIA H100 80GB HBM3)", f"torch {torch.__version__}"):
        assert part in title
    filled, hollow = ({tuple(p) for p in c.get_offsets()} for c in ax.collections[::-1])
    assert filled == {(r.activation_gib, r.step_ms) for r in rows if r.strategy in front}
    assert hollow == {(r.activation_gib, r.step_ms) for r in rows if r.activation_gib and r.strategy not in front}
    assert sorted(t.get_text() for t in ax.texts) == sorted(r.strategy for r in rows if r.status == "ok")
    _no_overlap(fig, ax)


def test_labels_of_a_dense_cluster_do_not_overlap():
    rows = [Row(f"offload:0.{i}", step_ms=100 + 0.1 * i, activation_gib=1.0 + 0.001 * i) for i in range(12)]
    fig = plots.compare_figure(rows, meta=META, frontier=pareto(rows))
    (ax,) = fig.axes
    assert len(_no_overlap(fig, ax)) == 12


def test_frontier_counts_measured_memory_only():
    # A row with no memory measured is not at zero memory: it dominates nothing.
    rows = [Row("measured", step_ms=100.0, activation_gib=1.0), Row("unmeasured", step_ms=50.0)]
    assert pareto(rows) == {"measured"}
    cpu = [Row("eager", step_ms=10.0), Row("inductor", step_ms=8.0)]
    assert pareto(cpu) == set()
    assert "no Pareto frontier" in harness.table(cpu)
    fig = plots.compare_figure(rows, meta=META, frontier=pareto(rows))
    assert "not plotted (no memory measured): unmeasured" in [t.get_text() for t in fig.texts]


def test_cpu_compare_plot_is_a_bar_chart_without_memory_axis():
    rows = [Row(r.strategy, status=r.status, step_ms=r.step_ms) for r in _rows()]
    meta = {**META, "device": "cpu", "gpu": None, "dtype": "float32"}
    fig = plots.compare_figure(rows, meta=meta, frontier=pareto(rows))
    (ax,) = fig.axes
    assert ax.get_xlabel() == "median step time (ms)" and ax.get_ylabel() == "strategy"
    assert "memory" not in ax.get_xlabel() + ax.get_ylabel()
    assert "no activation memory measured on cpu" in ax.get_title()
    assert f"torch {torch.__version__}" in ax.get_title()
    ok = [r for r in rows if r.status == "ok"]
    assert [t.get_text() for t in ax.get_yticklabels()] == [r.strategy for r in ok]
    assert [p.get_width() for p in ax.patches] == [r.step_ms for r in ok]


def test_write_outputs_draws_compare_png(tmp_path):
    spec = {"device": "cpu", "dtype": "float32", "preset": "tiny", "model": None, "steps": 1}
    harness.write_outputs([Row("eager", step_ms=5.0), Row("inductor", step_ms=4.0)], tmp_path, spec)
    assert (tmp_path / "compare.png").read_bytes().startswith(b"\x89PNG")
    assert not (tmp_path / "compare.svg").exists()
    assert json.loads((tmp_path / "compare.json").read_text())["pareto"] == []


# ---- without matplotlib -------------------------------------------------------------

@pytest.fixture
def no_matplotlib(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setattr(plots, "_warned", False)


def test_asking_for_a_plot_without_matplotlib_raises_a_clear_message(no_matplotlib, plan):
    with pytest.raises(plots.PlotsUnavailable, match=r"matplotlib.*pip install \"offload_compiler\[plots\]\""):
        plots.memory_figure(plan)
    with pytest.raises(ImportError, match="matplotlib"):
        plots.compare_figure(_rows(), meta=META, frontier=set())


def test_dump_and_compare_go_on_without_matplotlib_warning_once(no_matplotlib, tmp_path, caplog):
    from models import NormGeluMLP

    with caplog.at_level(logging.WARNING, logger="offload_compiler"):
        for i in range(2):
            torch._dynamo.reset()
            b = backend(**loopback(inner_compiler="eager", policy="cost_model", dump_dir=str(tmp_path / "d")))
            torch.compile(NormGeluMLP(), backend=b)(torch.randn(8, 32)).backward()
        spec = {"device": "cpu", "dtype": "float32", "preset": "tiny", "model": None, "steps": 1}
        harness.write_outputs([Row("eager", step_ms=5.0)], tmp_path / "c", spec)
    torch._dynamo.reset()
    for folder in ("graph_000", "graph_001"):
        assert (tmp_path / "d" / folder / "timeline.json").exists()
        assert not (tmp_path / "d" / folder / "memory.png").exists()
    assert (tmp_path / "c" / "compare.json").exists() and (tmp_path / "c" / "compare.txt").exists()
    assert not (tmp_path / "c" / "compare.png").exists()
    warnings = [r.getMessage() for r in caplog.records if "not drawn" in r.getMessage()]
    assert len(warnings) == 1 and 'pip install "offload_compiler[plots]"' in warnings[0]
    assert "memory.png" in warnings[0]


# ---- on a GPU (the lead runs these: python -m pytest -q -m gpu tests/test_plots_trace.py) ----

@pytest.mark.gpu
def test_compare_on_cuda_draws_the_pareto_plot_from_measured_memory(tmp_path):
    from offload_compiler import compare

    rows = compare.compare(preset="tiny", device="cuda", steps=1, warmup=0, caches="warm",
                           strategies=["inductor", "full_ac", "offload:0.5"], out=tmp_path)
    ok = [r for r in rows if r.status == "ok"]
    assert len(ok) == 3 and all(r.activation_gib is not None for r in ok), [(r.strategy, r.note) for r in rows]
    front = pareto(rows)
    assert front and front <= {r.strategy for r in ok}
    assert json.loads((tmp_path / "compare.json").read_text())["pareto"] == sorted(front)
    assert (tmp_path / "compare.png").read_bytes().startswith(b"\x89PNG")
    meta = json.loads((tmp_path / "compare.json").read_text())["meta"]
    fig = plots.compare_figure(rows, meta=meta, frontier=front)
    (ax,) = fig.axes
    assert ax.get_xlabel().startswith("activation memory (GiB") and torch.cuda.get_device_name() in ax.get_title()
    _no_overlap(fig, ax)


@pytest.mark.gpu
def test_cuda_plan_trace_pairs_every_copy_and_plots_its_budget(tmp_path):
    torch.manual_seed(0)
    cfg = preset("tiny")
    model, (idx, tgt) = GPT(cfg).cuda(), tuple(t.cuda() for t in make_batch(cfg))
    b = backend(policy="cost_model", memory_budget=0.3, min_offload_bytes=0, dump_dir=str(tmp_path))
    torch.compile(model, backend=b)(idx, tgt).backward()
    (p,) = b.plans
    trace = json.loads((tmp_path / "graph_000" / "timeline.json").read_text())
    assert len(_events(trace, "s")) == len(_events(trace, "f")) == len(p.offloaded) > 0
    assert (tmp_path / "graph_000" / "memory.png").read_bytes().startswith(b"\x89PNG")
    (ax,) = plots.memory_figure(p).axes
    assert f"budget {nbytes_text(p.predicted.budget_bytes)}" in _lines(ax)
