"""Inspection: dumps, annotated graph text, the Chrome trace, explain, the CLI, logging."""

import json
import logging
import re
import subprocess
import sys
from unittest import mock

import torch

import offload_compiler
from offload_compiler.models.gpt import GPT, make_batch, preset
from helpers import backend, loopback
from models import NormGeluMLP

STAGE_FILES = {"joint.py", "plan.json", "plan.txt", "summary.txt", "config.json",
               "timeline.json", "memory.png"}


def _dump(tmp, **options):
    torch.manual_seed(0)
    cfg = preset("tiny")
    model, (idx, tgt) = GPT(cfg), make_batch(cfg)
    b = backend(**loopback(**{"policy": "cost_model", "inner_compiler": "eager",
                              "memory_budget": 0.3, "dump_dir": str(tmp), **options}))
    torch.compile(model, backend=b)(idx, tgt).backward()
    return b


def test_dump_has_every_file_deterministic_names_no_duplicates(tmp_path):
    _dump(tmp_path / "a")
    torch._dynamo.reset()
    _dump(tmp_path / "b")
    names_a = sorted(p.relative_to(tmp_path / "a").as_posix() for p in (tmp_path / "a").rglob("*"))
    names_b = sorted(p.relative_to(tmp_path / "b").as_posix() for p in (tmp_path / "b").rglob("*"))
    assert names_a == names_b  # deterministic names
    folder = tmp_path / "a" / "graph_000"
    files = {p.name for p in folder.iterdir()}
    assert STAGE_FILES <= files
    for kind in ("forward", "backward"):
        stages = sorted(f for f in files if f.startswith(kind + "."))
        assert [re.sub(r"^\w+\.\d_", "", s) for s in stages] == [
            "partitioned.py", "recomputed.py", "transfers.py", "scheduled.py"]
        texts = [(folder / s).read_text() for s in stages]
        assert len(set(texts)) == len(texts), "a stage was written twice"
    plan = json.loads((folder / "plan.json").read_text())
    for d in plan["decisions"]:
        assert {"name", "nbytes", "decision", "reason"} <= set(d)
        assert d["decision"] in ("keep", "offload", "recompute")
    for key in ("activation_peak_bytes", "baseline_activation_peak_bytes", "peak_bytes",
                "step_ms", "baseline_step_ms"):
        assert key in plan["predicted"]
    assert json.loads((folder / "config.json").read_text())["memory_budget"] == 0.3
    assert (folder / "memory.png").read_bytes().startswith(b"\x89PNG")


def test_dump_dir_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("OFFLOAD_COMPILER_DUMP_DIR", str(tmp_path / "env"))
    b = backend(**loopback(inner_compiler="eager"))
    torch.compile(NormGeluMLP(), backend=b)(torch.randn(4, 32)).backward()
    assert (tmp_path / "env" / "graph_000" / "plan.json").exists()


def test_annotated_code_shows_stream_and_event_for_every_transfer(tmp_path):
    b = _dump(tmp_path)
    plan = b.plans[0]
    folder = tmp_path / "graph_000"
    for kind, gm in (("forward", plan.fw_graph), ("backward", plan.bw_graph)):
        text = (folder / f"{kind}.3_scheduled.py").read_text()
        notes = re.findall(r"# offload: (\w+) #\d+ of \w+: stream=(\w+) (?:records|waits) event=(\w+)", text)
        n_ops = len(re.findall(r"torch\.ops\.offload\.\w+\.default\(", text))
        assert n_ops > 0 and len(notes) == n_ops
        for kind_, stream, event in notes:
            assert stream in ("d2h", "h2d", "compute") and event.endswith(tuple("0123456789"))


def test_chrome_trace_is_valid_with_three_lanes(tmp_path):
    _dump(tmp_path)
    trace = json.loads((tmp_path / "graph_000" / "timeline.json").read_text())
    events = trace["traceEvents"]
    lanes = {e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert lanes == {"compute", "d2h", "h2d", "phase"}
    for e in events:
        assert e["ph"] in ("M", "X", "C", "i", "s", "f") and "pid" in e
        if e["ph"] == "X":
            assert e["dur"] >= 0 and e["ts"] >= 0 and isinstance(e["tid"], int)
    used = {e["tid"] for e in events if e["ph"] == "X"}
    assert used == {0, 1, 2, 3}  # compute, d2h, h2d and the phases all have slices
    assert any(e["ph"] == "C" and "plan" in e["name"] for e in events)


def test_explain_prints_the_table_and_has_the_contract():
    torch.manual_seed(0)
    report = offload_compiler.explain(NormGeluMLP(), torch.randn(8, 32), options=dict(
        devices=("cpu",), min_offload_bytes=0, inner_compiler="eager", memory_budget=0.5))
    text = str(report)
    for header in ("size", "decision", "module / source line", "tensor / shape", "reason"):
        assert header in text
    assert len(report.graphs) == 1 and report.decisions
    assert {d["decision"] for d in report.decisions} <= {"keep", "offload", "recompute"}
    for key in ("activation_peak_bytes", "baseline_activation_peak_bytes", "peak_bytes",
                "step_ms", "baseline_step_ms"):
        assert key in report.predicted and key in report.graphs[0].predicted
    assert report.predicted["activation_peak_bytes"] <= report.predicted["baseline_activation_peak_bytes"]


def test_explain_gives_one_entry_per_graph():
    class TwoGraphs(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = NormGeluMLP(), torch.nn.Linear(32, 32)

        def forward(self, x):
            y = self.b(x).relu()
            torch._dynamo.graph_break()
            return self.a(y)

    report = offload_compiler.explain(TwoGraphs(), torch.randn(8, 32), options=dict(
        devices=("cpu",), min_offload_bytes=0, inner_compiler="eager"))
    assert len(report.graphs) == 2
    assert len({g.graph_id for g in report.graphs}) == 2


def test_cli_inspect_prints_summary_table_code_and_timeline(tmp_path):
    _dump(tmp_path / "d")
    run = lambda *a: subprocess.run([sys.executable, "-m", "offload_compiler", "inspect", *a],  # noqa: E731
                                    capture_output=True, text=True, timeout=120)
    out = run(str(tmp_path / "d"))
    assert out.returncode == 0 and "graph_000" in out.stdout and "decision" in out.stdout
    out = run(str(tmp_path / "d"), "--graph", "0", "--code", "forward")
    assert out.returncode == 0 and "stream=d2h" in out.stdout
    out = run(str(tmp_path / "d"), "--timeline", str(tmp_path / "t.json"))
    assert out.returncode == 0 and json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    assert run(str(tmp_path / "empty")).returncode == 1


def test_one_info_line_per_graph_reasons_at_debug_and_trace_artifact(caplog):
    with mock.patch("torch._logging.trace_structured") as traced, \
            caplog.at_level(logging.DEBUG, logger="offload_compiler"):
        b = backend(**loopback(inner_compiler="eager", policy="cost_model"))
        torch.compile(NormGeluMLP(), backend=b)(torch.randn(8, 32)).backward()
    info = [r for r in caplog.records if r.name == "offload_compiler" and r.levelno == logging.INFO]
    debug = [r for r in caplog.records if r.name == "offload_compiler" and r.levelno == logging.DEBUG]
    assert len(info) == 1 and "offloaded" in info[0].getMessage() and "predicted" in info[0].getMessage()
    assert len(debug) == len(b.plans[0].decisions)
    (call,) = [c for c in traced.call_args_list if c.args and c.args[0] == "artifact"
               and c.kwargs["metadata_fn"]()["name"].startswith("offload_plan")]
    payload = json.loads(call.kwargs["payload_fn"]())
    assert payload["decisions"] and call.kwargs["metadata_fn"]()["encoding"] == "json"
