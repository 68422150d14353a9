"""Issue 20: dumps that never stop training, ``inspect`` on partial dumps, graph numbers
that agree with dump folder names, and ``explain`` that leaves the model as it was."""

import copy
import errno
import json
import logging
from pathlib import Path
from unittest import mock

import pytest
import torch
import torch.nn as nn

import offload_compiler
from offload_compiler.__main__ import main
from helpers import assert_bitwise, backend, loopback, train
from models import NormGeluMLP

DUMP_LOGGER = "offload_compiler.reporting.dump"


def _unwritable(tmp_path) -> Path:
    """A folder that cannot be created, even as root: its parent is a regular file."""
    (tmp_path / "a_file").write_text("not a folder")
    return tmp_path / "a_file" / "dumps"


def _inputs(step):
    torch.manual_seed(100 + step)
    return (torch.randn(8, 32),)


def _dump_warnings(caplog):
    return [r for r in caplog.records if r.name == DUMP_LOGGER and r.levelno == logging.WARNING]


# 1. A dump that cannot be written warns once and training goes on, same gradients.

@pytest.mark.parametrize("options", [
    {"inner_compiler": "eager"},                   # CPU tensors: the graph passes through unchanged
    loopback(inner_compiler="eager"),              # CPU "offload": every pass runs and dumps
], ids=["passes_through", "offloads"])
def test_unwritable_dump_dir_warns_once_and_training_goes_on(tmp_path, caplog, options):
    torch.manual_seed(0)
    model = NormGeluMLP()
    expected = train(model, _inputs, backend(**options))
    folder = _unwritable(tmp_path)
    with caplog.at_level(logging.WARNING, logger="offload_compiler"):
        got = train(model, _inputs, backend(**options, dump_dir=str(folder)))
        train(model, _inputs, backend(**options, dump_dir=str(folder)))  # a second graph, same folder
    assert_bitwise(got, expected)
    (warning,) = _dump_warnings(caplog)
    text = warning.getMessage()
    assert str(folder) in text and "Not a directory" in text and "dump_dir" in text
    assert not folder.exists()


def test_stray_environment_dump_dir_warns_and_training_goes_on(tmp_path, caplog, monkeypatch):
    torch.manual_seed(0)
    model = NormGeluMLP()
    expected = train(model, _inputs, backend(**loopback(inner_compiler="eager")))
    folder = _unwritable(tmp_path)
    monkeypatch.setenv("OFFLOAD_COMPILER_DUMP_DIR", str(folder))
    with caplog.at_level(logging.WARNING, logger="offload_compiler"):
        got = train(model, _inputs, backend(**loopback(inner_compiler="eager")))
    assert_bitwise(got, expected)
    (warning,) = _dump_warnings(caplog)
    assert str(folder) in warning.getMessage() and "OFFLOAD_COMPILER_DUMP_DIR" in warning.getMessage()


def test_a_write_that_fails_midway_stops_that_dump_and_warns_once_per_folder(tmp_path, caplog):
    torch.manual_seed(0)
    model = NormGeluMLP()
    expected = train(model, _inputs, backend(**loopback(inner_compiler="eager")))
    real_write = Path.write_text

    def disk_full_after_joint(self, text, *args, **kwargs):
        if self.name != "joint.py":
            raise OSError(errno.ENOSPC, "No space left on device", str(self))
        return real_write(self, text, *args, **kwargs)

    folder = tmp_path / "dumps"
    with mock.patch.object(Path, "write_text", disk_full_after_joint), \
            caplog.at_level(logging.WARNING, logger="offload_compiler"):
        got = train(model, _inputs, backend(**loopback(inner_compiler="eager", dump_dir=str(folder))))
        train(model, _inputs, backend(**loopback(inner_compiler="eager", dump_dir=str(folder))))
    assert_bitwise(got, expected)
    (warning,) = _dump_warnings(caplog)
    assert str(folder) in warning.getMessage() and "No space left on device" in warning.getMessage()
    # What was written before the failure stays, and nothing after it was tried for that graph.
    assert sorted(p.name for p in (folder / "graph_000").iterdir()) == ["joint.py"]


# 3. Graph numbers and dump folder names agree in what a person reads.

def _two_backends_one_folder(dump):
    """Two backends compile one graph each into ``dump``: graph_000 and graph_001."""
    plans = []
    for _ in range(2):
        torch._dynamo.reset()
        b = backend(**loopback(inner_compiler="eager", dump_dir=str(dump)))
        torch.compile(NormGeluMLP(), backend=b)(torch.randn(8, 32)).backward()
        plans += b.plans
    return plans


def test_dump_files_name_both_the_graph_and_its_dump_folder(tmp_path):
    first = backend(**loopback(inner_compiler="eager"))  # moves the process-wide graph counter
    torch.compile(NormGeluMLP(), backend=first)(torch.randn(8, 32)).backward()
    plans = _two_backends_one_folder(tmp_path / "d")
    assert [Path(p.dump_folder).name for p in plans] == ["graph_000", "graph_001"]
    assert plans[0].graph_id != 0  # the folder index and the graph id differ: both must be shown
    for plan in plans:
        folder = Path(plan.dump_folder)
        label = f"graph {plan.graph_id} (dump folder {folder.name})"
        assert (folder / "summary.txt").read_text().splitlines()[0] == label
        assert (folder / "plan.txt").read_text().splitlines()[0].startswith(label)
        data = json.loads((folder / "plan.json").read_text())
        assert data["graph_id"] == plan.graph_id and data["dump_folder"] == folder.name
        code = sorted(folder.glob("*.py"))
        assert {"joint.py", "forward.0_partitioned.py", "backward.0_partitioned.py"} <= {f.name for f in code}
        for f in code:
            assert f.read_text().startswith(f"# {label}\n"), f.name
        trace = json.loads((folder / "timeline.json").read_text())
        (process,) = [e for e in trace["traceEvents"] if e.get("name") == "process_name"]
        assert label in process["args"]["name"]


def test_inspect_heads_each_folder_with_its_graph(tmp_path, capsys):
    plans = _two_backends_one_folder(tmp_path / "d")
    assert main(["inspect", str(tmp_path / "d")]) == 0
    out = capsys.readouterr().out
    for plan in plans:
        assert f"== dump folder {Path(plan.dump_folder).name}: graph {plan.graph_id} ==" in out


# 2. inspect on partial dumps.

def test_inspect_partial_dump_shows_what_there_is_and_says_what_is_missing(tmp_path, capsys):
    dump = tmp_path / "d"
    plans = _two_backends_one_folder(dump)
    (dump / "graph_000" / "summary.txt").unlink()
    (dump / "graph_001" / "plan.txt").unlink()
    (dump / "graph_001" / "timeline.json").unlink()
    assert main(["inspect", str(dump), "--timeline", str(tmp_path / "t.json")]) == 0
    captured = capsys.readouterr()
    out, err = captured.out, captured.err
    assert "graph_000: summary.txt is missing" in err
    assert "graph_001: plan.txt is missing" in err
    assert "graph_001: timeline.json is missing" in err
    assert "decision" in out                             # graph_000's table
    assert f"graph {plans[1].graph_id} (dump folder graph_001)" in out  # graph_001's summary
    trace = json.loads((tmp_path / "t.json").read_text())
    names = [e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "process_name"]
    assert len(names) == 1 and "graph_000" in names[0]
    assert "timeline of 1 of 2 graph(s)" in out


def test_inspect_code_of_a_folder_without_that_stage(tmp_path, capsys):
    dump = tmp_path / "d"
    _two_backends_one_folder(dump)
    for f in (dump / "graph_001").glob("forward.*.py"):
        f.unlink()
    assert main(["inspect", str(dump), "--code", "forward"]) == 0
    captured = capsys.readouterr()
    last = max((dump / "graph_000").glob("forward.*_scheduled.py"))
    assert "# " + str(last) in captured.out and "stream=d2h" in captured.out
    assert "graph_001: no forward code (forward.*.py) is in the folder" in captured.err
    assert main(["inspect", str(dump), "--graph", "1", "--code", "forward"]) == 1
    (dump / "graph_000" / "joint.py").unlink()
    assert main(["inspect", str(dump), "--graph", "0", "--code", "joint"]) == 1
    assert "graph_000: joint.py is missing" in capsys.readouterr().err


def test_inspect_stage_order_is_numeric(tmp_path, capsys):
    folder = tmp_path / "d" / "graph_000"
    folder.mkdir(parents=True)
    (folder / "forward.2_transfers.py").write_text("stage two\n")
    (folder / "forward.10_later.py").write_text("stage ten\n")
    assert main(["inspect", str(tmp_path / "d"), "--code", "forward"]) == 0
    assert "stage ten" in capsys.readouterr().out


def test_inspect_exits_1_only_when_nothing_could_be_shown(tmp_path, capsys):
    dump = tmp_path / "d"
    (dump / "graph_000").mkdir(parents=True)
    (dump / "graph_001").mkdir()
    assert main(["inspect", str(dump)]) == 1
    err = capsys.readouterr().err
    assert "graph_000: summary.txt, plan.txt are missing" in err
    assert "nothing to show" in err
    (dump / "graph_001" / "summary.txt").write_text("graph 7 (dump folder graph_001)\n")
    assert main(["inspect", str(dump)]) == 0
    (dump / "graph_001" / "timeline.json").write_text("{not json")
    assert main(["inspect", str(dump), "--timeline", str(tmp_path / "t.json")]) == 0
    err = capsys.readouterr().err
    assert "graph_001: timeline.json is not valid JSON" in err
    assert "no timeline written" in err and not (tmp_path / "t.json").exists()
    assert main(["inspect", str(tmp_path / "nowhere")]) == 1
    assert "no folder" in capsys.readouterr().err


def test_inspect_bad_graph_says_which_graphs_exist(tmp_path, capsys):
    dump = tmp_path / "d"
    for n in (0, 1, 3):
        (dump / f"graph_{n:03d}").mkdir(parents=True)
        (dump / f"graph_{n:03d}" / "summary.txt").write_text(f"graph {n}\n")
    assert main(["inspect", str(dump), "--graph", "2"]) == 1
    err = capsys.readouterr().err
    assert "no dump folder graph_002" in err and "0, 1, 3" in err
    assert main(["inspect", str(dump), "--graph", "3"]) == 0
    with pytest.raises(SystemExit):
        main(["inspect", str(dump), "--graph", "-1"])
    assert "--graph" in capsys.readouterr().err


# 4. explain leaves parameters, buffers and the RNG state as they were.

class NormDropout(nn.Module):
    def __init__(self, d=32, fail=False):
        super().__init__()
        self.up, self.bn, self.drop, self.down = nn.Linear(d, 64), nn.BatchNorm1d(64), nn.Dropout(0.3), nn.Linear(64, d)
        self.fail = fail

    def forward(self, x):
        y = self.down(self.drop(self.bn(self.up(x)).relu()))
        if self.fail:
            raise ValueError("this model's forward fails after BatchNorm and dropout ran")
        return y.square().mean()


def _snapshot(model):
    """Copies of the state tensors, the tensors themselves, and the CPU generator state."""
    tensors = dict(model.state_dict(keep_vars=True))
    return {k: v.detach().clone() for k, v in tensors.items()}, tensors, torch.get_rng_state()


def _assert_unchanged(model, snapshot):
    copies, tensors, rng = snapshot
    after = model.state_dict(keep_vars=True)
    assert after.keys() == copies.keys()
    changed = [k for k, v in after.items() if not torch.equal(v, copies[k])]
    changed += [f"{k} (a new tensor)" for k, t in tensors.items() if after[k] is not t]
    changed += ["the CPU RNG state"] * (not torch.equal(torch.get_rng_state(), rng))
    assert not changed, f"explain changed {', '.join(changed)}"


def test_explain_leaves_parameters_buffers_and_rng_as_they_were():
    torch.manual_seed(0)
    model = NormDropout()
    model.bn.running_mean.uniform_()  # not the defaults, so a reset to them would show
    x = torch.randn(16, 32)
    snapshot = _snapshot(model)
    report = offload_compiler.explain(model, x, options=loopback(inner_compiler="eager"))
    assert report.decisions
    _assert_unchanged(model, snapshot)
    assert model.training


def test_explain_restores_the_model_when_its_forward_fails():
    torch.manual_seed(0)
    model = NormDropout(fail=True)
    x = torch.randn(16, 32)
    snapshot = _snapshot(model)
    with pytest.raises(ValueError, match="forward fails"):
        offload_compiler.explain(model, x, options=loopback(inner_compiler="eager"))
    _assert_unchanged(model, snapshot)


def test_explain_between_forward_and_backward_leaves_the_pending_backward_valid():
    # Only what the forward changed is written back: the weights a pending backward
    # saved keep their version counters, so that backward still runs, with the same result.
    # (Not with BatchNorm: eager BatchNorm saves its running statistics for backward, and
    # explain's forward updates them before they are restored.)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Dropout(0.3), nn.Linear(64, 1))
    x = torch.randn(16, 32)
    reference = copy.deepcopy(model)
    torch.manual_seed(1)
    reference(x).sum().backward()
    torch.manual_seed(1)
    loss = model(x).sum()
    offload_compiler.explain(model, x, options=loopback(inner_compiler="eager"))
    loss.backward()
    for (name, p), q in zip(model.named_parameters(), reference.parameters(), strict=True):
        assert torch.equal(p.grad, q.grad), name


@pytest.mark.gpu
def test_explain_leaves_the_cuda_rng_as_it_was():
    torch.manual_seed(0)
    model = NormDropout().cuda()
    x = torch.randn(16, 32, device="cuda")
    snapshot, cuda_rng = _snapshot(model), torch.cuda.get_rng_state_all()
    report = offload_compiler.explain(model, x, options={"memory_budget": 0.5, "min_offload_bytes": 0})
    assert report.graphs
    _assert_unchanged(model, snapshot)
    assert all(torch.equal(a, b) for a, b in zip(torch.cuda.get_rng_state_all(), cuda_rng))
