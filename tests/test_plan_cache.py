"""The plan cache: a plan made once is found again (issue 19; issue 20, item 2)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import offload_compiler
from offload_compiler.models.gpt import GPT, make_batch, preset
from offload_compiler.reporting import tables

ROOT = Path(__file__).resolve().parents[1]

OPTIONS = {"devices": ("cpu",), "min_offload_bytes": 0, "memory_budget": 0.3}


def _train_once(options, inner="inductor"):
    torch.manual_seed(0)
    cfg = preset("tiny")
    model = GPT(cfg)
    backend = offload_compiler.make_backend(**{**OPTIONS, **options, "inner_compiler": inner})
    out = torch.compile(model, backend=backend)(*make_batch(cfg))
    out.backward()
    return backend, [p.grad.clone() for p in model.parameters()]


def _record(plan):
    data = tables.plan_dict(plan)
    data.pop("graph_id"), data.pop("summary")
    return data


def test_a_second_compile_replays_the_plan_without_planning(monkeypatch, caplog):
    """Same graph, same options: the plan record is the same, no planning runs, and
    gradients are bitwise those of the compile that planned (eager inner compiler)."""
    from offload_compiler.planning import search

    first, grads = _train_once({}, inner="eager")
    torch._dynamo.reset()
    monkeypatch.setattr(search, "_plan_cost_model", lambda *a, **k: pytest.fail("planned again"))
    with caplog.at_level(logging.INFO, logger="offload_compiler"):
        second, grads_again = _train_once({}, inner="eager")
    assert "plan taken from the plan cache" in caplog.text
    assert [_record(p) for p in second.plans] == [_record(p) for p in first.plans]
    assert second.plans[0].offloaded and second.plans[0].recomputed
    # The backward's buffer pool (``lowering.plan_pool``) is marked as the plan that planned said.
    assert [_pool_marks(p) for p in second.plans] == [_pool_marks(p) for p in first.plans]
    assert all(None not in marks and marks for marks in map(_pool_marks, second.plans))
    for a, b in zip(grads, grads_again):
        assert torch.equal(a, b)


def _pool_marks(plan) -> list:
    from passes.nodes import is_transfer

    from offload_compiler import lowering

    return [n.meta.get(lowering._POOL) for n in plan.bw_graph.graph.nodes if is_transfer(n)]


def test_a_changed_option_or_cache_off_plans_again(monkeypatch, caplog):
    _train_once({})
    torch._dynamo.reset()
    with caplog.at_level(logging.INFO, logger="offload_compiler"):
        _train_once({"max_overhead": 0.1})
    assert "planning" in caplog.text and "plan cache" not in caplog.text
    caplog.clear()
    for switch in ({"plan_cache": False}, {}):
        torch._dynamo.reset()
        if not switch:
            monkeypatch.setenv("OFFLOAD_COMPILER_PLAN_CACHE", "0")
        with caplog.at_level(logging.INFO, logger="offload_compiler"):
            _train_once(switch)
        assert "plan taken from the plan cache" not in caplog.text, switch
        assert "planning" in caplog.text
        caplog.clear()


class _Measures:
    """A source that says it will measure the graph's device (and then measures nothing)."""

    def measures(self, device):
        return True

    def recorder(self, device, call, what, intervals=0, **held):
        return None


def test_an_unsearched_auto_plan_is_kept_apart_from_a_searched_one(caplog):
    """"auto"'s first plan of a graph the backend will measure is not searched; a compile
    that searches (nothing measured: the CUDA source on a CPU graph) must not take it
    from the cache, and one that measures finds it again, still provisional."""
    from offload_compiler.runtime import measure

    made = []
    for source in (_Measures(), None, _Measures()):
        torch._dynamo.reset()
        measure.set_source(source)
        caplog.clear()
        try:
            with caplog.at_level(logging.INFO, logger="offload_compiler"):
                backend, _ = _train_once({"memory_budget": "auto"})
        finally:
            measure.set_source(None)
        made.append((backend.plans[0].provisional, "plan taken from the plan cache" in caplog.text))
    assert made == [(True, False), (False, False), (True, True)]


def _joint(op):
    """A joint-like graph module: ``op`` of two inputs, made lazily (no code yet)."""
    from torch.fx._lazy_graph_module import _LazyGraphModule

    graph = torch.fx.Graph()
    a, b = graph.placeholder("a"), graph.placeholder("b")
    a.meta["val"], b.meta["val"] = torch.empty(2, 3), torch.empty(2, 3)
    graph.output((graph.call_function(op, (a, b)),))
    return _LazyGraphModule(torch.nn.Module(), graph)


def test_the_joint_hash_tells_joint_graphs_apart_without_generating_code():
    from offload_compiler.planning import cache

    gm = _joint(torch.ops.aten.add.Tensor)
    same = cache.joint_hash(gm)
    assert gm._needs_recompile()  # its code was not generated
    assert cache.joint_hash(_joint(torch.ops.aten.add.Tensor)) == same
    assert cache.joint_hash(_joint(torch.ops.aten.mul.Tensor)) != same
    other = _joint(torch.ops.aten.add.Tensor)
    other.graph.find_nodes(op="placeholder")[0].meta["val"] = torch.empty(2, 3, dtype=torch.float64)
    assert cache.joint_hash(other) != same


def test_an_entry_made_on_another_joint_graph_is_planned_afresh(monkeypatch, caplog):
    """Under the same key, a stored plan whose joint graph differs is not applied."""
    import dataclasses
    from offload_compiler.planning import cache

    _train_once({})
    load = cache.load

    def load_from_another_graph(key):
        entry = load(key)
        return entry and dataclasses.replace(entry, joint_hash="another graph")

    monkeypatch.setattr(cache, "load", load_from_another_graph)
    torch._dynamo.reset()
    with caplog.at_level(logging.INFO, logger="offload_compiler"):
        backend, _ = _train_once({})
    assert "holds a plan for another joint graph" in caplog.text
    assert "plan taken from the plan cache" not in caplog.text and backend.plans


def test_plan_cache_option_is_validated():
    with pytest.raises(ValueError, match="plan_cache"):
        offload_compiler.OffloadConfig(plan_cache="yes")


@pytest.fixture
def inductor_caches(tmp_path, monkeypatch):
    """Inductor's and AOTAutograd's caches on, in a folder of this test's own."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    with torch._inductor.config.patch(force_disable_caches=False):
        yield


def test_explain_after_training_reports_the_plan(inductor_caches):
    """Compiling the same graph again in one process (``explain`` after training) hits
    Inductor's cache, and once reported "no graph needed a backward pass": now it
    reports the plan."""
    trained, _ = _train_once({})
    torch._dynamo.reset()
    cfg = preset("tiny")
    torch.manual_seed(0)
    report = offload_compiler.explain(GPT(cfg), *make_batch(cfg), options=OPTIONS)
    assert report.graphs and "nothing to decide" not in str(report)
    assert report.decisions == tables.decision_dicts(trained.plans[0])


def test_an_unwritable_cache_warns_once_and_training_goes_on(tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("OFFLOAD_COMPILER_CACHE_DIR", str(blocker / "cache"))
    with caplog.at_level(logging.WARNING, logger="offload_compiler"):
        backend, _ = _train_once({})
        torch._dynamo.reset()
        _train_once({"max_overhead": 0.1})
    assert backend.plans
    assert caplog.text.count("cannot write the plan cache") == 1


_CHILD = r"""
import json, logging, sys, torch
logging.basicConfig(level=logging.INFO)
import offload_compiler
from offload_compiler.models.gpt import GPT, make_batch, preset
from offload_compiler.reporting import tables
options = json.loads(sys.argv[1])
torch.manual_seed(0)
cfg = preset("tiny")
backend = offload_compiler.make_backend(**options)
torch.compile(GPT(cfg), backend=backend)(*make_batch(cfg)).backward()
print(json.dumps([{k: v for k, v in tables.plan_dict(p).items() if k not in ("graph_id", "summary")}
                  for p in backend.plans]))
"""


def _child(options, tmp_path):
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("TORCHINDUCTOR_FORCE_DISABLE_CACHES", None)
    proc = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(options)], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def test_a_second_process_with_inductors_cache_warm_reports_the_same_plan_and_dumps(tmp_path):
    """In a second process Inductor's cache holds the compiled graphs and our partitioner
    is not called; the plan record, the log line and the dump still appear."""
    options = {**OPTIONS, "devices": ["cpu"], "dump_dir": str(tmp_path / "dumps")}
    cold, _ = _child(options, tmp_path)
    for folder in (tmp_path / "dumps").glob("graph_*"):
        folder.rename(folder.with_name("cold_" + folder.name))
    warm, log = _child(options, tmp_path)
    assert "compiled graphs from Inductor's cache, plan from the plan cache" in log
    assert cold and warm == cold
    (folder,) = (tmp_path / "dumps").glob("graph_*")
    assert json.loads((folder / "plan.json").read_text())["decisions"] == cold[0]["decisions"]
    assert (folder / "summary.txt").exists() and list(folder.glob("forward.*_scheduled.py"))


def test_inductors_cache_key_holds_the_partitioners_identity_not_its_plans():
    """Inductor deep-copies its config and pickles it into its FX graph cache key, the
    partitioner in it: a copy is the partitioner itself, a pickle is its uuid, whatever
    plans and graphs it reaches (these made every key cost seconds on large graphs)."""
    import copy
    import pickle

    from offload_compiler.config import OffloadConfig
    from offload_compiler.partitioner import OffloadPartitioner

    held = [torch.fx.symbolic_trace(torch.nn.Sequential(*[torch.nn.Linear(4, 4) for _ in range(50)]))]
    held.append(bytearray(10 * 2**20))
    p = OffloadPartitioner(OffloadConfig.from_options({}), on_plan=held.append)
    p.seconds, p.called = 3.5, True  # state that changes as it works: not in the key
    assert copy.deepcopy({"custom_partitioner_fn": p})["custom_partitioner_fn"] is p
    data = pickle.dumps(p)
    assert len(data) < 1000, len(data)
    q = OffloadPartitioner(OffloadConfig.from_options({}))
    assert pickle.dumps(q) == data  # equal identities, equal keys
    rebuilt = pickle.loads(data)
    assert rebuilt.uuid() == p.uuid()
    with pytest.raises(RuntimeError, match="rebuilt from a pickle cannot partition"):
        rebuilt(None, [], num_fwd_outputs=1)
    other = OffloadPartitioner(OffloadConfig.from_options({"memory_budget": 0.3}))
    assert pickle.dumps(other) != data


@pytest.mark.parametrize("how", ["plan_cache=False", "plan cache cleared"])
def test_a_graph_inductors_caches_hold_is_planned_again_where_no_plan_is_cached(tmp_path, monkeypatch, how):
    """With Inductor's and AOTAutograd's caches on, a graph compiled again is planned
    again (a plan recorded, its partition made) where the plan cache cannot tell the
    plan: off, or its entry gone. Before, AOTAutograd's cache held the compiled graph,
    the partitioner was not called, and the graph ran with no plan: nothing reported,
    measured or planned again."""
    import shutil

    from offload_compiler.planning import cache

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    options = {"plan_cache": False} if how == "plan_cache=False" else {}
    made = []
    with torch._inductor.config.patch(force_disable_caches=False), \
            torch._functorch.config.patch(enable_autograd_cache=True):
        for _ in range(2):
            torch._dynamo.reset()
            if not options:
                shutil.rmtree(cache.cache_dir() / "plans", ignore_errors=True)
            backend, _ = _train_once(options)
            made.append([(bool(p.offloaded), bool(p.recomputed)) for p in backend.plans])
    assert made[0] and made[1] == made[0]
