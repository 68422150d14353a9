"""Smoke test of the comparison harness on a tiny GPT on CPU."""

import json

from offload_compiler import compare


def test_compare_smoke_writes_table_json_and_plot(tmp_path):
    rows = compare.compare(preset="tiny", device="cpu", steps=1, warmup=0, budgets=(0.5,), caches="warm",
                           out=tmp_path)
    names = [r.strategy for r in rows]
    assert names == ["eager", "inductor", "full_ac", "sac", "budget:0.5", "torch_offload",
                     "offload:auto", "offload:0.5"]
    for r in rows:
        assert r.status in ("ok", "unsupported"), (r.strategy, r.status, r.note)
        if r.status == "ok":
            assert r.agrees == "yes", (r.strategy, r.loss, r.grad_norm)
            assert r.step_ms > 0 and r.tokens_per_s > 0
    data = json.loads((tmp_path / "compare.json").read_text())
    # No memory is measured on CPU: no frontier (eager is not "best" at an unknown memory).
    assert [r["strategy"] for r in data["rows"]] == names and data["pareto"] == []
    assert (tmp_path / "compare.png").read_bytes().startswith(b"\x89PNG")
    text = (tmp_path / "compare.txt").read_text()
    assert "no Pareto frontier" in text and "sac" in text
    # Each row that ran: the host's time to issue a synchronised step, in the table too.
    assert "host ms" in text and all(0 < r.extra["host_step_ms"] <= r.extra["synced_step_ms"]
                                     for r in rows if r.status == "ok")


def test_failures_are_rows_not_crashes():
    rows = compare.compare(preset="tiny", device="cpu", steps=1, warmup=0,
                           strategies=["eager", "inductor"], model="no_such_module:make")
    assert all(r.status == "failed" and "no_such_module" in r.note for r in rows)


def test_unknown_strategy_is_refused():
    import pytest

    with pytest.raises(ValueError, match="valid strategies"):
        compare.compare(strategies=["magic"])


def test_offload_options_reach_the_offload_rows_and_bad_ones_fail_early(tmp_path):
    import pytest

    with pytest.raises(ValueError, match="copy_margin"):
        compare.compare(strategies=["offload:auto"], offload_options={"copy_margin": 2})
    with pytest.raises(ValueError, match="strategy name sets them"):
        compare.compare(strategies=["offload:auto"], offload_options={"memory_budget": 0.5})
    (row,) = compare.compare(preset="tiny", device="cpu", steps=1, warmup=0, caches="warm",
                             strategies=["offload:0.5"], out=tmp_path,
                             offload_options={"dump_dir": str(tmp_path / "dump")})
    assert row.status == "ok", row.note
    assert list((tmp_path / "dump").glob("graph_*/plan.json"))
    # The planner's predictions travel with the row, the baseline's beside the plan's.
    assert row.extra["predicted_step_ms"] > 0 and row.extra["predicted_baseline_step_ms"] > 0
    assert 0 < row.extra["predicted_activation_gib"] <= row.extra["predicted_baseline_activation_gib"]
    # So does the hardware profile they were costed with (CPU runs: the fixed one).
    assert row.extra["hardware"]["name"] == "cpu-fixed"
    assert row.extra["hardware"]["d2h_gbps"] == 10.0


_ENV_PROBE = '''
import json, os, sys
from offload_compiler.models.gpt import PRESETS, GPT, make_batch


def make():
    seen = {k: os.environ.get(k) for k in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR",
                                           "OFFLOAD_COMPILER_PLAN_CACHE", "OFFLOAD_COMPILER_CACHE_DIR")}
    folder = seen["OFFLOAD_COMPILER_CACHE_DIR"]
    seen["profiles"] = sorted(os.listdir(folder)) if folder and os.path.isdir(folder) else None
    if folder and os.path.isdir(folder):  # as a row that calibrates a GPU would
        with open(os.environ["PROBE_FILE"]) as f:
            row = len(f.read().splitlines())
        with open(os.path.join(folder, "hardware-row%d.json" % row), "w") as f:
            f.write("{}")
    with open(os.environ["PROBE_FILE"], "a") as f:
        f.write(json.dumps(seen) + "\\n")
    cfg = PRESETS["tiny"]
    return GPT(cfg), make_batch(cfg)
'''


def test_each_row_compiles_with_cold_caches_unless_told_warm(tmp_path, monkeypatch):
    """The first-step column is a first compile: each row's process has an Inductor cache
    folder of its own, Triton's under it, and an empty plan cache of its own (the plan
    cache on, as a user's first compile has it) holding the calibrated hardware
    profiles; a profile a row calibrates is copied back. ``caches="warm"`` passes the
    environment's caches through. Rows report the first step's compile phases."""
    import os

    import pytest

    (tmp_path / "envprobe.py").write_text(_ENV_PROBE)
    probe = tmp_path / "seen.jsonl"
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("PROBE_FILE", str(probe))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "mine_triton"))
    monkeypatch.delenv("OFFLOAD_COMPILER_PLAN_CACHE", raising=False)
    mine = tmp_path / "my_offload_cache"
    mine.mkdir()
    (mine / "hardware-gpu0.json").write_text("{}")
    (mine / "plans").mkdir()  # a plan cached before: no row sees it
    monkeypatch.setenv("OFFLOAD_COMPILER_CACHE_DIR", str(mine))
    probe.write_text("")
    with pytest.raises(ValueError, match="'cold', 'warm'"):
        compare.compare(strategies=["inductor"], caches="hot")
    rows = compare.compare(preset=None, model="envprobe:make", device="cpu", steps=1, warmup=0,
                           strategies=["inductor", "offload:0.5"])
    assert [r.status for r in rows] == ["ok", "ok"], [r.note for r in rows]
    seen = [json.loads(line) for line in probe.read_text().splitlines()]
    folders = [s["TORCHINDUCTOR_CACHE_DIR"] for s in seen]
    assert len(set(folders)) == 2 and str(tmp_path / "mine") not in folders
    assert all(s["TRITON_CACHE_DIR"] is None and s["OFFLOAD_COMPILER_PLAN_CACHE"] is None for s in seen)
    plans = [s["OFFLOAD_COMPILER_CACHE_DIR"] for s in seen]
    assert len(set(plans)) == 2 and str(mine) not in plans
    # The profiles calibrated before (and by the first row, for the second) and no plans.
    assert [s["profiles"] for s in seen] == [["hardware-gpu0.json"], ["hardware-gpu0.json", "hardware-row0.json"]]
    assert sorted(p.name for p in mine.glob("hardware-*.json")) == [
        "hardware-gpu0.json", "hardware-row0.json", "hardware-row1.json"]
    assert not any(os.path.exists(f) for f in folders + plans)  # removed after each row
    phases = rows[1].extra["first_step_s_by_phase"]
    assert phases["OffloadPartitioner"] > 0 and phases["compile_fx_inner"] > 0
    (timed,) = rows[1].extra["step_times_ms"]  # steps=1: each synchronised step, beside their median
    assert timed > 0 and rows[1].extra["synced_step_ms"] == pytest.approx(timed, abs=1e-3)
    assert rows[1].step_ms > 0  # the steps run back to back
    from offload_compiler.compare import harness

    with harness._worker_env("warm") as env:
        assert env == dict(os.environ)


def test_the_step_time_is_of_steps_run_back_to_back():
    """A training loop does not synchronise between steps: the row's step time is the
    wall time of ``steps`` steps issued one after another, from a synchronisation to the
    one after the last, over their number."""
    from offload_compiler.compare.run import back_to_back

    calls = []
    ms = back_to_back(lambda: calls.append("step"), lambda: calls.append("zero_grad"),
                      lambda: calls.append("sync"), 3)
    assert calls == ["sync"] + ["step", "zero_grad"] * 3 + ["sync"] and ms >= 0



def test_blocks_are_the_largest_module_list_or_the_path_named():
    """Without a ModuleList the error says to name the blocks, a Sequential too (a
    Sequential is not guessed: ResNet's largest stage would be checkpointed alone)."""
    import pytest
    import torch.nn as nn

    from offload_compiler.compare import find_blocks

    model = nn.Module()
    model.blocks = nn.Sequential(*(nn.Linear(2, 2) for _ in range(2)))
    with pytest.raises(ValueError, match="name the repeated blocks with --blocks, a dotted path to a "
                                         "ModuleList or Sequential"):
        find_blocks(model, None)
    assert find_blocks(model, "blocks") is model.blocks
    model.layers = nn.ModuleList([nn.Linear(2, 2)])
    assert find_blocks(model, None) is model.layers


def test_a_row_past_its_timeout_keeps_its_log_and_says_what_it_was_doing(tmp_path, monkeypatch):
    import subprocess

    from offload_compiler.compare import harness

    def slow(cmd, **kwargs):
        # What subprocess.run raises at its limit: the output so far, as bytes even in text mode.
        raise subprocess.TimeoutExpired(cmd, kwargs["timeout"], output=b"",
                                        stderr=b"compiling graph 0\noffload: graph 0: planning again\n")

    monkeypatch.setattr(harness.subprocess, "run", slow)
    row = harness._run_in_subprocess({"strategy": "offload:auto"}, 7.0, tmp_path)
    assert row.status == "timeout"
    assert row.note == "over 7 s; last logged: offload: graph 0: planning again"
    assert (tmp_path / "offload_auto.log").read_text().endswith("planning again\n")
