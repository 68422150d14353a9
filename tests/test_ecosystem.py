"""Fitting in: the memory budget API, errors at the right time and in the right words,
warnings, TORCH_LOGS, the command lines' exit codes, packaging, JSON schema versions and
progress lines (issue 23, parts 1, 2, 6 and 7)."""

import copy
import importlib.util
import json
import logging
import os
import pickle
import re
import subprocess
import sys
import traceback
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

import offload_compiler
from offload_compiler import ByteSize, OffloadConfig
from offload_compiler._logging import _names_alias, _without_alias
from offload_compiler._version import (SCHEMA_VERSION, TESTED_TORCH, torch_version_warning,
                                       warn_on_untested_torch)
from offload_compiler.backend import InvalidOptions
from offload_compiler.compare import cli
from offload_compiler.compare.run import Row
from offload_compiler.config import budget_from_text
from offload_compiler.reporting import inspect_dump
from helpers import backend, loopback
from models import NormGeluMLP

ROOT = Path(__file__).resolve().parents[1]


def _run(args, *, env=None, cwd=ROOT, timeout=300):
    """``python args...`` from the repository root (this checkout's package first)."""
    full_env = {**os.environ, **(env or {})}
    full_env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), *[p for p in [full_env.get("PYTHONPATH")] if p]])
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd,
                          env=full_env, timeout=timeout)


def _mlp_step(b, x=None):
    torch.manual_seed(0)
    model = NormGeluMLP()
    x = torch.randn(64, 32) if x is None else x
    torch.compile(model, backend=b)(x).backward()


# --- 1. the memory budget ------------------------------------------------------------

@pytest.mark.parametrize("value", [1, 0, 3, 2**30, np.int64(1), np.int32(4096), torch.tensor(1).item()])
def test_an_int_budget_is_refused_with_what_to_write_instead(value):
    with pytest.raises(ValueError) as err:
        OffloadConfig(memory_budget=value)
    text = str(err.value)
    assert "an int is refused" in text and "a string with a unit" in text, text
    if int(value) == 1:
        assert "write 1.0" in text and 'memory_budget="1GiB"' in text
    if int(value) == 2**30:
        assert 'memory_budget="1GiB"' in text  # the same bytes, written readably
    with pytest.raises(ValueError, match="an int is refused"):
        offload_compiler.make_backend(memory_budget=value)


@pytest.mark.parametrize("text", ["1", "1073741824", "0.5", " 12 "])
def test_a_number_as_a_string_is_refused(text):
    with pytest.raises(ValueError, match="has no unit"):
        OffloadConfig(memory_budget=text)


def test_bytes_with_a_unit_are_an_int_that_prints_as_written():
    c = OffloadConfig(memory_budget="12GiB")
    assert isinstance(c.memory_budget, ByteSize) and c.memory_budget == 12 * 2**30
    assert int(c.memory_budget) == 12 * 2**30 and type(int(c.memory_budget)) is int
    assert str(c.memory_budget) == "12GiB" and "memory_budget='12GiB'" in repr(c)
    assert OffloadConfig(memory_budget="1.5 GB").memory_budget == 1_500_000_000
    assert OffloadConfig(memory_budget="512MiB").memory_budget == 512 * 2**20
    # The stored form is valid input: replace(), pickle (the plan cache) and copy keep it.
    for again in (c.replace(policy="all"), pickle.loads(pickle.dumps(c)), copy.deepcopy(c)):
        assert again.memory_budget == 12 * 2**30 and str(again.memory_budget) == "12GiB"
    assert hash(c) == hash(OffloadConfig(memory_budget="12GiB"))
    # Fractions: any real number that is not an integer type; 1.0 is no change.
    assert OffloadConfig(memory_budget=np.float32(0.5)).memory_budget == 0.5
    assert OffloadConfig(memory_budget=1.0).memory_budget == 1.0


def test_command_line_budgets_follow_the_same_rules():
    assert budget_from_text("auto") == "auto"
    assert budget_from_text("0.5") == 0.5 and budget_from_text("1.0") == 1.0
    assert budget_from_text("2GiB") == 2 * 2**30 and str(budget_from_text("2GiB")) == "2GiB"
    for bad in ("1", "3", "1.5", "0", "-0.5", "lots"):
        with pytest.raises(ValueError):
            budget_from_text(bad)


def test_a_byte_budget_reaches_the_planner_as_bytes_and_config_json_as_written(tmp_path):
    b = backend(**loopback(policy="cost_model", inner_compiler="eager",
                           memory_budget="64KiB", dump_dir=str(tmp_path)))
    _mlp_step(b)
    (plan,) = b.plans
    assert plan.predicted["budget_bytes"] == 64 * 2**10
    config = json.loads((tmp_path / "graph_000" / "config.json").read_text())
    assert config["memory_budget"] == "64KiB"
    assert OffloadConfig.from_options({k: v for k, v in config.items() if k != "schema_version"}) == b.config


# --- 2. errors before tracing, in the user's words ------------------------------------

def test_bad_options_through_torch_compile_raise_unwrapped_with_a_short_traceback():
    compiled = torch.compile(NormGeluMLP(), backend="offload", options={"memory_budget": 1})
    with pytest.raises(ValueError) as err:
        compiled(torch.randn(4, 32))
    assert isinstance(err.value, InvalidOptions)
    assert not isinstance(err.value, torch._dynamo.exc.BackendCompilerFailed)
    text = str(err.value)
    assert 'backend="offload"' in text and "memory_budget=1 is not valid" in text
    assert "write 1.0" in text
    # The traceback shows the user's call, then starts again in the backend: no Dynamo
    # frames from the compile (convert_frame, output_graph) in between.
    frames = traceback.extract_tb(err.value.__traceback__)
    files = [Path(f.filename).name for f in frames]
    assert "output_graph.py" not in files and "convert_frame.py" not in files, files
    assert frames[-1].name == "offload_backend"
    assert frames[0].filename == __file__  # the user's line comes first


def test_bad_policy_names_the_valid_values_unwrapped():
    compiled = torch.compile(NormGeluMLP(), backend="offload", options={"policy": "bogus"})
    with pytest.raises(InvalidOptions, match=r"policy='bogus' is not valid; choose one of \('cost_model', 'all', 'none'\)"):
        compiled(torch.randn(4, 32))


def test_make_backend_refuses_at_once():
    with pytest.raises(ValueError, match="memory_budget"):
        offload_compiler.make_backend(memory_budget=2)


def _warnings(caplog, fragment):
    return [r for r in caplog.records if r.levelno == logging.WARNING and fragment in r.getMessage()]


def test_a_model_on_no_offloadable_device_warns_once_per_graph(caplog):
    caplog.set_level(logging.INFO, logger="offload_compiler")
    _mlp_step(backend(inner_compiler="eager"))  # default devices=("cuda",), a CPU model
    (record,) = _warnings(caplog, "none on a device type")
    text = record.getMessage()
    assert "tensors on cpu" in text and "devices=('cuda',)" in text
    assert 'options={"devices": ("cpu",)}' in text
    caplog.clear()
    torch._dynamo.reset()
    _mlp_step(backend(inner_compiler="eager", devices=("cpu",)))
    torch._dynamo.reset()
    _mlp_step(backend(inner_compiler="eager", policy="none"))
    assert not _warnings(caplog, "none on a device type")


def test_two_graphs_warn_twice(caplog):
    caplog.set_level(logging.WARNING, logger="offload_compiler")

    def f(x, w):
        y = torch.tanh(x @ w)
        torch._dynamo.graph_break()
        return (torch.sigmoid(y @ w)).sum()

    w = torch.randn(16, 16, requires_grad=True)
    torch.compile(f, backend=backend(inner_compiler="eager"))(torch.randn(8, 16), w).backward()
    assert len(_warnings(caplog, "none on a device type")) == 2


# --- 3. a budget the plan cannot meet --------------------------------------------------

def test_a_budget_the_plan_cannot_meet_is_a_warning_with_sizes(caplog):
    caplog.set_level(logging.WARNING, logger="offload_compiler")
    options = loopback(policy="cost_model", inner_compiler="eager", memory_budget="1B")
    b = backend(**options)
    _mlp_step(b)
    (record,) = _warnings(caplog, "not reachable")
    text = record.getMessage()
    assert f"graph {b.plans[0].graph_id}:" in text and "memory_budget='1B'" in text
    assert "at most 1 B" in text
    assert re.search(r"the best plan found holds \d+\.\d (KiB|MiB)", text), text
    assert re.fullmatch(r"budget of 1 B not reachable: best effort predicts \d+\.\d (KiB|MiB)",
                        b.plans[0].note), b.plans[0].note  # the plan's note speaks in units too
    # A plan taken from the plan cache is the same plan: it is said again.
    torch._dynamo.reset()
    b2 = backend(**options)
    _mlp_step(b2)
    assert len(_warnings(caplog, "not reachable")) == 2
    # A budget that is met is not warned about; "auto" never is.
    caplog.clear()
    for budget in (1.0, "auto"):
        torch._dynamo.reset()
        _mlp_step(backend(**loopback(policy="cost_model", inner_compiler="eager", memory_budget=budget)))
    assert not _warnings(caplog, "not reachable")


# --- 4. TORCH_LOGS ----------------------------------------------------------------------

_COMPILE = """
import offload_compiler, torch
model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.GELU(), torch.nn.Linear(32, 1))
options = {"devices": ("cpu",), "inner_compiler": "eager", "min_offload_bytes": 0, "policy": "all"}
torch.compile(model, backend="offload", options=options)(torch.randn(8, 32)).sum().backward()
print("done")
"""
_DECISION = re.compile(r"offload: graph \d+: (keep|offload|recompute) \w+ \(\d+ bytes\)")


def test_torch_logs_plus_offload_logs_decisions_at_debug():
    proc = _run(["-c", _COMPILE], env={"TORCH_LOGS": "+offload"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "done" in proc.stdout
    assert _DECISION.search(proc.stderr), proc.stderr[-3000:]  # DEBUG
    assert "saved activations" in proc.stderr  # INFO


def test_torch_logs_offload_is_info_and_keeps_the_other_names():
    proc = _run(["-c", _COMPILE], env={"TORCH_LOGS": "offload,+dynamo"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "saved activations" in proc.stderr and not _DECISION.search(proc.stderr)
    assert "calling compiler function offload" in proc.stderr  # dynamo's own INFO line


def test_the_alias_is_found_and_removed_among_other_names():
    assert _names_alias("+offload") and _names_alias("dynamo, -offload") and not _names_alias("offload_compiler")
    assert _without_alias("+dynamo,offload,graph_breaks") == "+dynamo,graph_breaks"


# --- 5. command lines, packaging, schema versions ----------------------------------------

@pytest.mark.parametrize("args,message", [
    (["--strategies", "foo"], "unknown strategy 'foo'; valid strategies: eager"),
    (["--budgets", "1.5"], "'1.5' is not a fraction"),
    (["--budgets", "3"], "'3' is not a fraction"),
    (["--strategies", "offload:1"], "memory_budget=1 is not valid"),
    (["--strategies", "budget:2GiB"], "'2GiB' is not a fraction"),
    (["--steps", "0"], "'0' is not an integer >= 1"),
    (["--offload-options", "{bad"], "not JSON"),
    (["--offload-options", '{"devices": ["cpu"]}'], "may not set ['devices']"),
])
def test_compare_refuses_bad_arguments_with_exit_2_and_no_traceback(args, message):
    proc = _run(["-m", "offload_compiler", "compare", *args])
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-2000:]


def test_version_and_defaults_in_help():
    for module in ("offload_compiler", "offload_compiler.compare"):
        proc = _run(["-m", module, "--version"])
        assert proc.returncode == 0
        assert proc.stdout.strip() == (f"offload_compiler {offload_compiler.__version__} (torch "
                                       f"{torch.__version__}, Python {sys.version.split()[0]})")
    proc = _run(["-m", "offload_compiler.compare", "--help"])
    assert proc.returncode == 0
    help_text = " ".join(proc.stdout.split())
    assert "(default: 5)" in help_text and "(default: 0.5,0.2)" in help_text
    assert "exit status:" in help_text and "3 rows disagree" in help_text


def test_exit_code_of_rows():
    ok = Row("eager", loss=1.0, grad_norm=1.0, agrees="yes")
    assert cli.exit_code([ok, Row("offload:auto", status="oom")]) == cli.EXIT_OK
    assert cli.exit_code([Row("eager", status="failed")]) == cli.EXIT_NOTHING_RAN
    assert cli.exit_code([ok, Row("sac", agrees="NO (vs eager)")]) == cli.EXIT_DISAGREE


_FACTORY = """
import os, torch

def make():
    torch.manual_seed(os.getpid())  # every row's process builds another model: rows disagree
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    return model, (torch.randn(8, 16),)
"""


def test_compare_exits_3_when_rows_disagree_and_says_each_row_as_it_goes(tmp_path):
    (tmp_path / "disagreeing.py").write_text(_FACTORY)
    out = tmp_path / "out"
    proc = _run(["-m", "offload_compiler.compare", "--model", "disagreeing:make", "--device", "cpu",
                 "--steps", "1", "--warmup", "0", "--strategies", "eager,offload:0.5",
                 "--offload-options", '{"inner_compiler": "eager"}', "--out", str(out)],
                env={"PYTHONPATH": str(tmp_path)}, timeout=600)
    assert proc.returncode == cli.EXIT_DISAGREE, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "NO (vs eager)" in proc.stdout
    lines = proc.stderr.splitlines()
    started = lines.index("compare: [1/2] eager: started")
    assert re.fullmatch(r"compare: \[1/2\] eager: ok in \d+\.\d s", lines[started + 1]), lines
    assert "compare: [2/2] offload:0.5: started" in lines
    assert any(re.fullmatch(r"compare: \[2/2\] offload:0\.5: ok in \d+\.\d s", x) for x in lines)
    assert "rows disagree" in proc.stderr and "offload:0.5 NO (vs eager)" in proc.stderr
    data = json.loads((out / "compare.json").read_text())
    assert data["schema_version"] == SCHEMA_VERSION == 1


def test_every_json_of_a_dump_has_a_schema_version(tmp_path):
    dump = tmp_path / "dump"
    _mlp_step(backend(**loopback(policy="cost_model", inner_compiler="eager", memory_budget=0.5,
                                 dump_dir=str(dump))))
    folder = dump / "graph_000"
    names = sorted(p.name for p in folder.glob("*.json"))
    assert names == ["config.json", "plan.json", "timeline.json"]
    for name in names:
        data = json.loads((folder / name).read_text())
        assert data["schema_version"] == 1, name
    assert json.loads((folder / "timeline.json").read_text())["traceEvents"]
    out = tmp_path / "t.json"
    assert inspect_dump.write_timeline(inspect_dump.graph_folders(dump), out) == 0
    assert json.loads(out.read_text())["schema_version"] == 1


def test_the_cached_hardware_profile_has_a_schema_version_and_reads_back(monkeypatch):
    from offload_compiler.planning import hardware

    monkeypatch.setattr(hardware, "_memo", {})
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Test GPU 1")
    measured = hardware.dataclasses.replace(hardware.H100_PROFILE, name="Test GPU 1")
    monkeypatch.setattr(hardware, "calibrate", lambda device: measured)
    assert hardware.profile_for("cuda") == measured
    (path,) = hardware._cache_dir().glob("hardware-Test-GPU-1-*.json")
    assert json.loads(path.read_text())["schema_version"] == 1

    def never(device):
        raise AssertionError("calibrated again instead of reading the cached profile")

    monkeypatch.setattr(hardware, "_memo", {})
    monkeypatch.setattr(hardware, "calibrate", never)
    assert hardware.profile_for("cuda") == measured


def test_untested_torch_versions_warn():
    lo, hi = TESTED_TORCH
    assert torch_version_warning(f"{lo[0]}.{lo[1]}.0") is None
    assert torch_version_warning("2.13.0+cpu") is None and torch_version_warning("2.12.1+cu126") is None
    for version in ("2.10.0", "2.14.0", "2.14.0.dev20260101+cu128", "3.0.0"):
        message = torch_version_warning(version)
        assert message is not None and version in message and ">=2.11,<2.14" in message
    with pytest.warns(UserWarning, match=r"torch 2\.10\.0 is installed"):
        warn_on_untested_torch("2.10.0")


def test_pyproject_agrees_with_the_package():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    lo, hi = TESTED_TORCH
    assert f"torch>={lo[0]}.{lo[1]},<{hi[0]}.{hi[1]}" in project["project"]["dependencies"]
    assert project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "offload_compiler._version.__version__"}
    assert project["project"]["scripts"]["offload-compiler"] == "offload_compiler.__main__:main"
    assert "py.typed" in project["tool"]["setuptools"]["package-data"]["offload_compiler"]
    assert (ROOT / "offload_compiler" / "py.typed").exists()
    assert "MIT License" in (ROOT / "LICENSE").read_text()
    assert "offload_compiler authors" in (ROOT / "LICENSE").read_text()


@pytest.mark.skipif(os.environ.get("OFFLOAD_COMPILER_SKIP_WHEEL") == "1",
                    reason="OFFLOAD_COMPILER_SKIP_WHEEL=1")
def test_the_wheel_ships_version_license_types_and_the_console_script(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(tmp_path), str(ROOT)], check=True, cwd=tmp_path)
    (wheel,) = tmp_path.glob("offload_compiler-*.whl")
    assert wheel.name.startswith(f"offload_compiler-{offload_compiler.__version__}-")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        info = next(n for n in names if n.endswith(".dist-info/METADATA")).rsplit("/", 1)[0]
        metadata = z.read(f"{info}/METADATA").decode()
        entry_points = z.read(f"{info}/entry_points.txt").decode()
    assert "offload_compiler/py.typed" in names and f"{info}/licenses/LICENSE" in names
    assert "Requires-Dist: torch<2.14,>=2.11" in metadata and "License-Expression: MIT" in metadata
    assert "offload-compiler = offload_compiler.__main__:main" in entry_points


# --- 6. progress -------------------------------------------------------------------------

def _train_module():
    spec = importlib.util.spec_from_file_location("train_example", ROOT / "examples" / "train.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_example_says_what_it_is_doing_before_the_long_first_step(capsys):
    train = _train_module()
    train.main(["--steps", "3", "--log-every", "2", "--policy", "all", "--inner-compiler", "eager"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("step 0: compiling: Dynamo traces, the offload backend plans")
    assert re.fullmatch(r"step 0: loss \d+\.\d{4}  \d+\.\d s \(compile and first step\)", lines[1]), lines
    assert re.fullmatch(r"step 2: loss \d+\.\d{4}  \d+\.\d ms", lines[2]), lines  # every 2nd, and the last
    assert not any(line.startswith("step 1:") for line in lines)


def test_the_example_refuses_an_int_budget(capsys):
    train = _train_module()
    with pytest.raises(SystemExit) as err:
        train.parse_args(["--memory-budget", "1"])
    assert err.value.code == 2
    assert "write 1.0" in capsys.readouterr().err
    assert train.parse_args(["--memory-budget", "256MiB"]).memory_budget == 256 * 2**20


@pytest.mark.gpu
def test_on_a_gpu_the_default_devices_do_not_warn_and_the_calibrated_profile_has_a_schema_version(
        caplog, monkeypatch):
    from offload_compiler.planning import hardware

    caplog.set_level(logging.WARNING, logger="offload_compiler")
    monkeypatch.setattr(hardware, "_memo", {})  # calibrate into this test's cache folder (conftest)
    torch.manual_seed(0)
    model = NormGeluMLP(d=256).cuda()
    b = backend(inner_compiler="eager", min_offload_bytes=0, memory_budget=0.5)
    torch.compile(model, backend=b)(torch.randn(512, 256, device="cuda")).backward()
    assert b.plans and not b.plans[0].off_device
    assert not _warnings(caplog, "none on a device type")
    (path,) = hardware._cache_dir().glob("hardware-*.json")
    assert json.loads(path.read_text())["schema_version"] == 1
    calibrated = hardware.profile_for("cuda")

    def never(device):
        raise AssertionError("calibrated again instead of reading the cached profile")

    monkeypatch.setattr(hardware, "_memo", {})
    monkeypatch.setattr(hardware, "calibrate", never)
    assert hardware.profile_for("cuda") == calibrated
