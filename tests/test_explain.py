"""Reports in the user's terms and planning without running: decision tables keyed by
module path and source line, sizes with units, parameters and inputs apart, largest first,
``top``, 100 columns; ``explain`` and ``plan_offline`` on fake tensors (the plan a training
compile makes, nothing run); the ``explain`` command line; ``inspect --top``."""

from __future__ import annotations

import argparse
import copy
import os
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import offload_compiler
from offload_compiler.models.gpt import GPT, make_batch, preset
from offload_compiler.config import OffloadConfig
from offload_compiler.offline import PROFILES, load_profile, trace_and_plan
from offload_compiler.reporting import tables
from offload_compiler.reporting.explain_cli import split_inputs
from offload_compiler.reporting.inspect_dump import main_inspect
from offload_compiler.reporting.records import nbytes_text
from helpers import backend, loopback
from models import NormGeluMLP

ROOT = Path(__file__).resolve().parents[1]
LOOP = {"devices": ("cpu",), "min_offload_bytes": 0, "memory_budget": 0.5}


def _gpt():
    torch.manual_seed(0)
    cfg = preset("tiny")
    return GPT(cfg), make_batch(cfg)


def model_summary(report) -> str:
    return "\n".join(g.summary for g in report.graphs)


def _record(name, nbytes, decision="keep", kind="activation", module="", line="", reason="why"):
    return {"name": name, "producer": "aten.mm.default", "shape": [4, 8], "dtype": "bfloat16",
            "device": "cpu", "nbytes": nbytes, "decision": decision, "copy_ms": None,
            "reason": f"{decision}: {reason}", "module_path": module, "source_line": line, "kind": kind}


@pytest.mark.parametrize("nbytes, text", [
    (0, "0 B"), (1023, "1023 B"), (1536, "1.5 KiB"), (5 * 2**20, "5.0 MiB"), (3 * 2**30 // 2, "1.50 GiB"),
])
def test_sizes_read_with_units(nbytes, text):
    assert nbytes_text(nbytes) == text


def test_table_is_largest_first_with_parameters_apart_and_top_saying_what_it_left_out():
    records = [_record("small", 2**10, module="blocks.0.mlp", line="m.py:3 in forward"),
               _record("weight", 2**30, kind="input", module="blocks.0.attn.qkv", line="m.py:1 in forward"),
               _record("big", 3 * 2**20, decision="offload", module="blocks.1.attn.qkv", line="m.py:2 in f"),
               _record("mid", 2 * 2**20, decision="recompute", module="head")]
    text = tables.decision_table(records, top=2)
    activations, inputs = text.split("\n\n")
    assert activations.splitlines()[0] == "saved activations: 3 (5.0 MiB), largest first"
    assert activations.index("big") < activations.index("mid") and "small" not in activations
    assert "... 1 more not shown (1.0 KiB; top=2)" in activations
    assert "3.0 MiB" in activations and "blocks.1.attn.qkv" in activations and "m.py:2 in f" in activations
    assert "offload: why" not in activations and "why" in activations  # the decision is not said twice
    assert inputs.startswith("saved parameters and inputs: 1 (1.00 GiB)") and "weight" in inputs
    assert "weight" not in activations
    assert tables.decision_table(records).count("not shown") == 0


def test_table_fits_100_columns_with_long_paths_and_reasons():
    long_path = "model.layers.17.self_attention.query_key_value_projection"
    records = [_record(f"mm_{i}", 2**20 * (i + 1), decision="offload", module=long_path,
                       line="modeling_some_very_long_model_name.py:1234 in forward",
                       reason="a reason " * 40) for i in range(3)]
    text = tables.decision_table(records)
    longest = max(len(line) for line in text.splitlines())
    assert longest <= tables.TABLE_WIDTH, f"{longest} columns:\n{text}"
    assert "..." in text  # reasons past REASON_LINES lines are cut
    assert "model.layers.17." in text  # a long module path breaks after a dot


def test_table_reads_records_of_older_dumps_without_kind_or_module():
    old = [{k: v for k, v in _record("mm", 2**20).items() if k not in ("kind", "module_path", "source_line")}]
    assert "mm" in tables.decision_table(old) and "parameters" not in tables.decision_table(old)


@pytest.mark.parametrize("top", [0, -1, 2.5, True, "3"])
def test_top_is_a_positive_number_of_rows(top):
    with pytest.raises(ValueError, match="positive number of rows"):
        tables.decision_table([], top=top)


def test_explain_rows_name_modules_and_lines_and_keep_parameters_out_of_the_activations():
    model, batch = _gpt()
    report = offload_compiler.explain(model, *batch, options=LOOP, top=3)
    records = report.decisions
    qkv = [d for d in records if d["module_path"] == "blocks.0.attn.qkv" and d["kind"] == "activation"]
    assert qkv and all(re.fullmatch(r"gpt\.py:\d+ in forward", d["source_line"]) for d in qkv)
    inputs = [d for d in records if d["kind"] == "input"]
    assert inputs and all(d["producer"] == "placeholder" or "graph input" in d["reason"] for d in inputs)
    assert {d["module_path"] for d in inputs} >= {"tok", "blocks.0.attn.qkv"}  # where each is first read
    text = str(report)
    assert f"saved activations: {len(records) - len(inputs)} (" in text
    assert re.search(rf"inputs +{len(inputs)} tensors", model_summary(report))
    assert max(map(len, text.splitlines())) <= tables.TABLE_WIDTH
    assert "more not shown" in text and "top=3" in text
    assert report.table(top=1).count("top=1") == 2  # both sections cut
    assert "not shown" not in report.table()
    with pytest.raises(ValueError, match="positive number of rows"):
        report.table(top=0)


def test_explain_plans_as_training_does_without_running_the_model():
    """The plan made on fake tensors (Inductor's passes, no kernels) is the one a training
    compile makes; the model's tensors (the same objects, the same values) and the RNG
    are as they were."""
    torch.manual_seed(0)
    model, x = NormGeluMLP(), torch.randn(8, 32)
    options = loopback(policy="cost_model", memory_budget=0.5, plan_cache=False)
    trained = backend(**options)
    torch.compile(copy.deepcopy(model), backend=trained)(x).sum().backward()
    torch._dynamo.reset()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    params = {k: p for k, p in model.named_parameters()}
    rng = torch.get_rng_state()
    report = offload_compiler.explain(model, x, options=options)
    assert report.decisions == tables.decision_dicts(trained.plans[0])
    plan = trained.plans[0]
    assert plan.inputs and plan.summary().startswith(
        f"graph {plan.graph_id}: {len(plan.decisions) - len(plan.inputs)} saved activations")
    assert f"(and {len(plan.inputs)} parameters or inputs saved as they are" in plan.summary()
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    assert all(p is params[k] for k, p in model.named_parameters()) and torch.equal(rng, torch.get_rng_state())


def test_plan_offline_plans_a_meta_model_for_cuda_in_loopback_on_a_cpu():
    if torch.cuda.is_available():
        pytest.skip("loopback is what a machine without CUDA does")
    cfg = preset("tiny")
    with torch.device("meta"):
        model = GPT(cfg)
    report = offload_compiler.plan_offline(model, *make_batch(cfg), device="cuda",
                                           options={"min_offload_bytes": 0, "memory_budget": 0.5})
    assert str(report).startswith("planned for cuda on the CPU (no CUDA here): loopback, with the h100 profile")
    assert report.graphs and any(d["decision"] != "keep" for d in report.decisions)
    assert report.graphs[0].predicted["step_ms"] < 1.0  # an H100's rates, not the CPU profile's
    assert all(p.is_meta for p in model.parameters())


def test_predicted_holders_say_what_makes_the_simulated_step_peak():
    cfg = preset("tiny")
    with torch.device("meta"):
        model = GPT(cfg)
    options = {"min_offload_bytes": 0, "memory_budget": 0.5, "devices": ("cpu",), "hardware": PROFILES["h100"]}
    torch._dynamo.reset()
    plan, = trace_and_plan(model, make_batch(cfg), {}, OffloadConfig.from_options(options),
                           device=torch.device("cpu"))
    activations, *live = plan.simulation.step_peak_holders
    assert activations + sum(h.nbytes for h in live) == plan.predicted.step_peak_bytes
    lines = plan.predicted_holders(most=3)
    assert lines[0] == f"{nbytes_text(activations)} activations saved for backward (kept, reloaded or recomputed)"
    assert len(lines) == 1 + min(3, len(live)) and len(live) >= 3
    # Each names its node, module, phase and source line, largest first.
    first = plan.simulation.origins.op(live[0].op)
    assert lines[1].startswith(f"{nbytes_text(live[0].nbytes)} {first.node} (")
    assert ("backward" if plan.simulation.origins.in_backward(live[0].op) else "forward") in lines[1]
    assert all(re.search(r"\.py:\d+ in ", line) for line in lines[1:])
    # explain prints them under each graph's summary.
    report = offload_compiler.plan_offline(model, *make_batch(cfg), device="cuda", options={"memory_budget": 0.5})
    text = str(report)
    assert report.graphs[0].peak_holders[0].endswith("activations saved for backward (kept, reloaded or recomputed)")
    assert "\nat the predicted step peak:\n  " + report.graphs[0].peak_holders[0] in text
    assert max(map(len, text.splitlines())) <= tables.TABLE_WIDTH


def test_profiles_by_name_file_or_dict_and_what_is_wrong_with_a_bad_one(tmp_path):
    assert load_profile("h100") == PROFILES["h100"]
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps({**PROFILES["h100"], "d2h_gbps": 20.0, "name": "my GPU"}))
    assert load_profile(path)["d2h_gbps"] == 20.0 and load_profile(str(path))["h2d_gbps"] == 55.3
    with pytest.raises(ValueError, match=r"neither a named profile \['h100'\] nor a JSON file"):
        load_profile("h200")
    with pytest.raises(ValueError, match="lacks"):
        load_profile({"d2h_gbps": 20.0})
    with pytest.raises(ValueError, match="unknown key"):
        load_profile({**PROFILES["h100"], "pcie": 5})
    with pytest.raises(ValueError, match="valid devices are"):
        offload_compiler.plan_offline(NormGeluMLP(), torch.randn(2, 32), device="mps")


@pytest.mark.parametrize("inputs, args, kwargs", [
    ((1, 2), (1, 2), {}),
    ({"input_ids": 1}, (), {"input_ids": 1}),
    (((1,), {"labels": 2}), (1,), {"labels": 2}),
    ([[1], {"labels": 2}], (1,), {"labels": 2}),
])
def test_factory_inputs_are_args_keywords_or_both(inputs, args, kwargs):
    assert split_inputs(inputs) == (args, kwargs)


FACTORY = textwrap.dedent('''
    import torch
    from offload_compiler.models.gpt import GPT, make_batch, preset

    def gpt():
        cfg = preset("tiny")
        with torch.device("meta"):
            model = GPT(cfg)
        idx, tgt = make_batch(cfg)
        return model, ((idx,), {"targets": tgt})

    def not_a_pair():
        return 3
''')


def test_cli_explain_plans_a_factory(tmp_path):
    (tmp_path / "factories.py").write_text(FACTORY)
    out = subprocess.run(
        [sys.executable, "-m", "offload_compiler", "explain", "factories:gpt", "--device", "cpu", "--top", "2",
         "--options", '{"devices": ["cpu"], "min_offload_bytes": 0}', "--budget", "0.5"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert "saved activations" in out.stdout and "top=2" in out.stdout and "blocks.0" in out.stdout
    assert max(map(len, out.stdout.splitlines())) <= tables.TABLE_WIDTH


@pytest.mark.parametrize("args, message", [
    (["FILE:nope"], "has no function nope"),
    (["factories"], "is not module:function"),
    (["no_such_module_here:f"], "cannot import no_such_module_here"),
    (["FILE:not_a_pair"], "must return (model, inputs)"),
    (["FILE:gpt", "--budget", "3"], "memory_budget=3.0 is not valid"),
    (["FILE:gpt", "--profile", "h200"], "neither a named profile"),
    (["FILE:gpt", "--options", "[1]"], "give a JSON object of options"),
    (["FILE:gpt", "--top", "x"], "not a number of rows"),
    (["FILE:gpt", "--device", "mps"], "invalid choice"),
])
def test_cli_explain_refuses_bad_arguments_with_exit_2(tmp_path, capsys, args, message):
    from offload_compiler.__main__ import main

    (tmp_path / "factories.py").write_text(FACTORY)
    args = [a.replace("FILE", str(tmp_path / "factories.py")) for a in args]
    with pytest.raises(SystemExit) as exit_:
        main(["explain", *args])
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_cli_explain_says_a_memory_limit_no_plan_meets_without_a_traceback(tmp_path, capsys):
    """A ``memory_limit`` under every plan's step peak: the planner's error, with its shortfall
    and what holds the least peak, exit 1; not Dynamo's wrapping of it and a traceback."""
    from offload_compiler.__main__ import main

    (tmp_path / "factories.py").write_text(FACTORY)
    code = main(["explain", f"{tmp_path / 'factories.py'}:gpt", "--device", "cpu",
                 "--options", '{"devices": ["cpu"], "min_offload_bytes": 0, "memory_limit": "1KiB"}'])
    err = capsys.readouterr().err
    assert code == 1, err[-2000:]
    assert re.search(r"^explain: graph \d+: memory_limit cannot be met", err, re.M) and " short" in err, err[-2000:]
    assert "Traceback" not in err and "BackendCompilerFailed" not in err, err[-2000:]


def test_inspect_top_cuts_each_table_from_plan_json(tmp_path, capsys):
    model, (idx, tgt) = _gpt()
    torch.compile(model, backend=backend(**loopback(
        policy="cost_model", inner_compiler="eager", memory_budget=0.5, dump_dir=str(tmp_path))))(idx, tgt).backward()
    capsys.readouterr()
    args = argparse.Namespace(dump_dir=str(tmp_path), graph=None, code=None, timeline=None, top=2)
    assert main_inspect(args) == 0
    shown = capsys.readouterr().out
    assert shown.count("top=2") == 2 and "saved activations" in shown
    args.top = None
    assert main_inspect(args) == 0
    assert "not shown" not in capsys.readouterr().out


@pytest.mark.gpu
def test_explain_and_plan_offline_on_cuda_plan_as_training_does():
    """On a GPU the fake tensors are CUDA tensors: the plan is the training compile's, and
    plan_offline of a meta-device model for cuda makes the same plan."""
    torch.manual_seed(0)
    cfg = preset("tiny")
    model = GPT(cfg).cuda()
    idx, tgt = make_batch(cfg, device="cuda")
    options = {"min_offload_bytes": 0, "memory_budget": 0.5, "plan_cache": False}
    trained = backend(**options)
    torch.compile(copy.deepcopy(model), backend=trained)(idx, tgt).backward()
    torch._dynamo.reset()
    report = offload_compiler.explain(model, idx, tgt, options=options)
    assert report.decisions == tables.decision_dicts(trained.plans[0])
    torch._dynamo.reset()
    with torch.device("meta"):
        meta = GPT(cfg)
    offline = offload_compiler.plan_offline(meta, *make_batch(cfg), device="cuda", options=options)
    assert offline.header.startswith("planned for cuda on this machine")
    assert [(d["name"], d["decision"]) for d in offline.decisions] == \
        [(d["name"], d["decision"]) for d in report.decisions]


class _Scaled(torch.nn.Module):
    def __init__(self, branch: bool = False):
        super().__init__()
        self.lin, self.scale, self.branch = torch.nn.Linear(16, 16), torch.full((16,), 2.0), branch

    def forward(self, x):
        y = self.lin(x) * self.scale  # a plain tensor attribute: neither parameter nor buffer
        if self.branch and y.sum() > 0:  # reads a value: fake tensors have none
            return y.relu().sum()
        return y.relu().sum()


def test_explain_reads_a_plain_tensor_attribute_and_says_why_a_value_cannot_be_read():
    report = offload_compiler.explain(_Scaled(), torch.randn(4, 16), options=LOOP)
    assert any(d["kind"] == "activation" and d["source_line"].startswith("test_explain.py:")
               for d in report.decisions)
    with pytest.raises(RuntimeError, match="needs a tensor's values .* backend.plans"):
        offload_compiler.explain(_Scaled(branch=True), torch.randn(4, 16), options=LOOP)
