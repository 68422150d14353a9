"""``benchmarks/zoo.py``, the model zoo, on a CPU: the listing, a tiny GPT end to end,
refusals, the memory limits derived from measured rows, and the order and time budget of its rows."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from offload_compiler.compare import Row

ROOT = Path(__file__).resolve().parents[1]
ZOO = ROOT / "benchmarks" / "zoo.py"


if str(ROOT) not in sys.path:  # benchmarks/ is a namespace package of the checkout
    sys.path.insert(0, str(ROOT))
zoo = importlib.import_module("benchmarks.zoo")


def test_list_names_models_and_strategies_without_importing_torch():
    code = ("import runpy, sys\n"
            f"sys.argv = ['zoo.py', '--list']\n"
            "try:\n"
            f"    runpy.run_path({str(ZOO)!r}, run_name='__main__')\n"
            "except SystemExit as e:\n"
            "    assert e.code == 0, e.code\n"
            "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('torch', 'transformers', 'timm', 'torchvision'))\n"
            "assert not heavy, heavy\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for name in ("llama", "vit", "resnet50", "gpt", "tiny_gpt"):
        assert f"\n{name}: " in "\n" + out, out
    lines = out.splitlines()
    llama = lines[lines.index(next(l for l in lines if l.startswith("llama:"))) + 1]
    assert llama.split() == ["strategies:", "inductor,sac,full_ac,budget:0.5,offload:auto,"
                                            "offload:0.5,offload-limit:FULL,offload-limit:MID"]
    resnet = lines[lines.index(next(l for l in lines if l.startswith("resnet50:"))) + 1]
    assert "sac," not in resnet and "full_ac" in resnet and "no sac:" in out


def test_tiny_gpt_runs_two_rows_writes_zoo_json_and_prints_the_table(tmp_path, capsys):
    out = tmp_path / "zoo"
    rc = zoo.main(["--models", "tiny_gpt", "--device", "cpu", "--strategies",
                   "inductor,offload:auto", "--steps", "1", "--warmup", "0", "--out", str(out), "--dump",
                   "--caches", "warm"])
    printed = capsys.readouterr().out
    assert rc == 0, printed
    data = json.loads((out / "zoo.json").read_text())
    rows = data["models"]["tiny_gpt"]["rows"]
    assert [(r["strategy"], r["status"], r["agrees"]) for r in rows] == [
        ("inductor", "ok", "yes"), ("offload:auto", "ok", "yes")], rows
    assert all(r["step_ms"] > 0 and r["compile_s"] > 0 for r in rows)
    assert data["not_run"] == [] and data["meta"]["device"] == "cpu"
    # The harness's own files, with both rows, and one log per row, in OUT/<model>/.
    compare = json.loads((out / "tiny_gpt" / "compare.json").read_text())
    assert [r["strategy"] for r in compare["rows"]] == ["inductor", "offload:auto"]
    assert (out / "tiny_gpt" / "inductor.log").exists() and (out / "tiny_gpt" / "offload_auto.log").exists()
    # The offload row's log holds planning's phases; --dump kept its plan per graph.
    assert "offload: graph 0: planned in" in (out / "tiny_gpt" / "offload_auto.log").read_text()
    assert list((out / "tiny_gpt" / "dump" / "offload_auto").glob("graph_*/plan.json"))
    # A line as each row starts, then the table.
    assert "zoo: tiny_gpt: inductor ...\n" in printed and "zoo: tiny_gpt: offload:auto ...\n" in printed
    table = printed[printed.index("== tiny_gpt"):]
    assert "x inductor step" in table and "compile s" in table and "agrees" in table
    # Each row's host time to issue a synchronised step, and the collections over its steps.
    assert "host ms" in table and all(0 < r["extra"]["host_step_ms"] <= r["extra"]["synced_step_ms"]
                                      for r in rows)
    assert all(r["extra"]["gc"]["collections"] >= 0 for r in rows)
    assert "offload:auto" in table and "act GiB: memory is measured on CUDA only" in table


@pytest.mark.parametrize("argv, message", [
    (["--models", "llama,bert"], "unknown model(s) ['bert']; valid models: llama, llama_blocks, vit, resnet50, gpt, tiny_gpt, tiny_gpt_blocks"),
    (["--models", "gpt", "--strategies", "inductor,magic"], "valid strategies: eager, inductor"),
    (["--models", "gpt", "--strategies", "offload:1.5"], "unknown strategy 'offload:1.5'"),
    (["--models", "gpt", "--strategies", "budget"], "unknown strategy 'budget'"),
    (["--models", "gpt", "--strategies", "offload-limit:FULL,inductor,full_ac"],
     "list inductor and full_ac before it"),
    (["--models", "gpt", "--strategies", "inductor,offload-limit:MID,full_ac"],
     "offload-limit:MID is run after the rows it is computed from: list full_ac before it"),
    (["--models", "gpt", "--steps", "0"], "must be > 0"),
    (["--models", "gpt"], "--out is required"),
    (["--models", "gpt", "--offload-options", "{bad"], "--offload-options: not JSON"),
    (["--models", "gpt", "--offload-options", '{"memory_budget": 0.5}'], "may not set ['memory_budget']"),
    (["--models", "gpt", "--offload-options", '{"copy_margin": 2}'], "copy_margin"),
])
def test_bad_arguments_are_refused_naming_the_valid_ones(argv, message, capsys, tmp_path):
    if "--out" not in argv and message != "--out is required":
        argv = [*argv, "--out", str(tmp_path)]
    with pytest.raises(SystemExit) as e:
        zoo.main(argv)
    assert e.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "zoo.json").exists()


def _row(strategy, act=None, status="ok", note=""):
    return Row(strategy=strategy, status=status, step_ms=10.0, activation_gib=act,
               compile_s=1.0, loss=1.0, grad_norm=1.0, note=note)


def _peaked(strategy, peak, status="ok", note=""):
    row = _row(strategy, 1.0, status, note)
    row.peak_gib = peak
    return row


@pytest.mark.parametrize("full_ac, limit", [
    (3.73, "3819MiB"),      # 3819.52 MiB: rounded down, so the row's limit is never above it
    (3.0, "3072MiB"),
])
def test_full_limit_is_full_ac_peak_rounded_down(full_ac, limit):
    rows = [_peaked("inductor", 10.56), _peaked("sac", 8.2), _peaked("full_ac", full_ac)]
    assert zoo.full_limit(rows) == limit


@pytest.mark.parametrize("rows, message", [
    ([_peaked("inductor", 9.5)], "needs a measured full_ac row (not run)"),
    ([_peaked("inductor", None, status="oom", note="CUDA out of memory"), _peaked("full_ac", 3.0)],
     "needs a measured inductor row (oom: CUDA out of memory)"),
    ([_peaked("inductor", 9.5), _row("full_ac")], "needs the full_ac row's peak, measured on CUDA only"),
])
def test_full_limit_refuses_with_the_reason(rows, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        zoo.full_limit(rows)


def test_full_runs_after_its_rows_and_the_time_budget_stops_new_rows(tmp_path):
    """offload-limit:FULL runs as offload-limit:<full_ac's peak in MiB>; once
    --budget-seconds have passed no row starts, and the rows left are reported as not run."""
    measured = {"inductor": (9.51, 10.5), "full_ac": (3.46, 4.5), "offload-limit:4608MiB": (3.3, 4.4)}
    started, now = [], [0.0]

    def run(model, strategy, settings):
        started.append(strategy)
        now[0] += 100.0  # each row takes 100 s
        act, peak = measured[strategy]
        row = _row(strategy, act)
        row.peak_gib = peak
        return row

    settings = zoo.Settings(device="cuda", steps=1, warmup=0, timeout_s=60, out=tmp_path,
                            budget_s=250)
    plan = {"gpt": ["inductor", "full_ac", zoo.FULL, "offload:auto"],
            "llama": ["inductor"]}
    results = zoo.run_zoo(plan, settings, run=run, clock=lambda: now[0])
    assert started == ["inductor", "full_ac", "offload-limit:4608MiB"]
    gpt = results["gpt"]
    assert [(r.strategy, r.status) for r in gpt] == [
        ("inductor", "ok"), ("full_ac", "ok"), ("offload-limit:4608MiB", "ok"), ("offload:auto", "not run")]
    assert gpt[2].extra["zoo_strategy"] == "offload-limit:FULL" and "offload-limit:FULL" in gpt[2].note
    assert "--budget-seconds 250 spent" in gpt[3].note
    assert [(r.strategy, r.status) for r in results["llama"]] == [("inductor", "not run")]
    data = json.loads((tmp_path / "zoo.json").read_text())
    assert [(x["model"], x["strategy"]) for x in data["not_run"]] == [
        ("gpt", "offload:auto"), ("llama", "inductor")]
    table = zoo.model_table(zoo.MODELS["gpt"], gpt)
    assert "offload-limit:FULL=4608MiB" in table and "at full checkpointing's memory" in table
    # No sac row: activation ratios are to Inductor's, and the table says so.
    assert "x inductor act" in table and "no measured sac row" in table
    line = next(l for l in table.splitlines() if l.startswith("full_ac"))
    assert "0.364" in line.split()  # 3.46 / 9.51
    # With a full_ac row, each row's step is also read against its step.
    header = table.splitlines()[1].split("  ")
    assert "x full_ac step" in [h.strip() for h in header]
    assert "x full_ac step" not in zoo.model_table(zoo.MODELS["gpt"], gpt[:1])


def test_a_model_whose_package_is_missing_is_not_run_and_says_which(tmp_path, monkeypatch):
    fake = zoo.ZooModel("fake", "benchmarks.zoo_models:tiny_gpt", "float32", "float32", "blocks",
                        "a model needing a package nobody has", needs="torch,no_such_package_zoo")
    monkeypatch.setitem(zoo.MODELS, "fake", fake)

    def run(model, strategy, settings):
        raise AssertionError(f"{strategy} started")

    settings = zoo.Settings(device="cpu", steps=1, warmup=0, timeout_s=60, out=tmp_path)
    rows = zoo.run_zoo({"fake": ["inductor", "offload:auto"]}, settings, run=run)["fake"]
    assert [(r.strategy, r.status, r.note) for r in rows] == [
        ("inductor", "not run", "no_such_package_zoo not installed"),
        ("offload:auto", "not run", "no_such_package_zoo not installed")]


def test_mid_limit_row_runs_with_the_midpoint_of_the_measured_peaks(tmp_path):
    """offload-limit:MID runs as offload-limit:<(inductor peak + full_ac peak) / 2 in MiB>;
    the table prints the predictions beside the measurements, what the backend measured,
    and its step with nothing moved beside the inductor row's."""
    peaks = {"inductor": 20.0, "full_ac": 10.0}
    started = []

    def run(model, strategy, settings):
        started.append(strategy)
        row = _row(strategy, 1.0)
        row.peak_gib = peaks.get(strategy, 14.5)
        if strategy.startswith("offload-limit:"):
            row.extra.update(predicted_step_ms=101.0, predicted_step_peak_gib=4.25, replanned=1,
                             predicted_baseline_step_ms=10.5,
                             measured_vs_predicted=[dict(
                                 graph=1, replaces=0, in_force=True, measured_step_ms=100.0, predicted_step_ms=101.0,
                                 measured_step_peak_gib=4.2, predicted_step_peak_gib=4.25,
                                 stall_ms=0.1, peak_phase="backward", holders=[])],
                             not_run=[dict(graph=2, replaces=1, note="predicted no faster than graph 1; not run")])
        return row

    settings = zoo.Settings(device="cuda", steps=1, warmup=0, timeout_s=60, out=tmp_path)
    results = zoo.run_zoo({"gpt": ["inductor", "full_ac", zoo.MID]}, settings, run=run)
    assert started == ["inductor", "full_ac", "offload-limit:15360MiB"]
    table = zoo.model_table(zoo.MODELS["gpt"], results["gpt"])
    assert "offload-limit:MID=15360MiB" in table and "midpoint" in table
    assert "graph 1 (re-planned): measured 100.0 ms / 4.20 GiB (peak in backward), predicted 101.0 ms" in table
    assert "graph 2 (re-planned, compiled; predicted no faster than graph 1; not run)" in table
    # the backend's baseline beside Inductor's measured step (each _row measures 10.0 ms)
    assert ("offload-limit:MID=15360MiB: step with nothing moved 10.5 ms as the backend predicts it, "
            "10.0 ms as the inductor row measured it (+5.0%); this row's step 10.0 ms against 100.0 ms "
            "the backend timed of its plan in force") in table
    with pytest.raises(ValueError, match="needs the inductor row's peak, measured on CUDA only"):
        zoo.mid_limit([_row("inductor", 1.0), _row("full_ac", 1.0)])  # no peaks: measured on CPU


def test_a_per_block_model_compiles_every_row_one_block_at_a_time(tmp_path, capsys):
    """``tiny_gpt_blocks`` (as ``llama_blocks``): each row compiles every block on its own,
    and the step-memory rows, which do not translate into a per-call budget, say so."""
    assert zoo.FULL not in zoo.MODELS["llama_blocks"].default_strategies()
    out = tmp_path / "zoo"
    rc = zoo.main(["--models", "tiny_gpt_blocks", "--device", "cpu", "--strategies",
                   "inductor,full_ac,offload:0.5,offload-limit:FULL", "--steps", "1", "--warmup", "0",
                   "--out", str(out), "--caches", "warm"])
    printed = capsys.readouterr().out
    assert rc == 0, printed
    rows = json.loads((out / "zoo.json").read_text())["models"]["tiny_gpt_blocks"]["rows"]
    assert [(r["strategy"], r["status"]) for r in rows] == [
        ("inductor", "ok"), ("full_ac", "ok"), ("offload:0.5", "ok"), ("offload-limit:FULL", "not run")], rows
    assert "bounds each block's call" in rows[-1]["note"]
    assert all(r["agrees"] == "yes" for r in rows[:3])


def test_run_row_passes_the_models_compile_mode(monkeypatch, tmp_path):
    import offload_compiler.compare as compare_module

    seen = {}

    def fake_compare(**kwargs):
        seen.update(kwargs)
        return [Row(strategy=kwargs["strategies"][0])]

    monkeypatch.setattr(compare_module, "compare", fake_compare)
    settings = zoo.Settings(device="cpu", steps=1, warmup=0, timeout_s=10, out=tmp_path)
    for name, mode in (("llama_blocks", "per-block"), ("llama", "whole")):
        zoo.run_row(zoo.MODELS[name], "inductor", settings)
        assert seen["compile_mode"] == mode and seen["caches"] == "cold"
    args, _ = zoo.parse_args(["--models", "llama", "--out", str(tmp_path), "--caches", "warm"])
    assert args.caches == "warm"
    zoo.run_row(zoo.MODELS["llama"], "inductor", zoo.Settings(**{**vars(settings), "caches": "warm"}))
    assert seen["caches"] == "warm"
    assert seen["offload_options"] is None


def test_offload_options_reach_every_row_beside_the_dump(monkeypatch, tmp_path):
    import offload_compiler.compare as compare_module

    seen = {}
    monkeypatch.setattr(compare_module, "compare",
                        lambda **kw: seen.update(kw) or [Row(strategy=kw["strategies"][0])])
    args, _ = zoo.parse_args(["--models", "vit", "--out", str(tmp_path),
                              "--offload-options", '{"max_host_bytes": 0}'])
    settings = zoo.Settings(device="cpu", steps=1, warmup=0, timeout_s=10, out=tmp_path, dump=True,
                            offload_options=args.offload_options)
    zoo.run_row(zoo.MODELS["vit"], "offload:auto", settings)
    assert seen["offload_options"] == {"max_host_bytes": 0,
                                       "dump_dir": str(tmp_path / "vit" / "dump" / "offload_auto")}


def test_the_backends_own_timing_is_set_beside_the_row_only_for_one_graph_in_force():
    """The row's step is the whole step; the backend times one compiled graph's span. With
    one graph in force (a re-plan given up: the plan it replaced) the two are set side by
    side; with two graphs in force (a graph break) one graph's span is not the step."""
    def measured(graph, ms, replaces=None, reverted=False):
        return dict(graph=graph, replaces=replaces, reverted=reverted, in_force=not reverted, measured_step_ms=ms,
                    predicted_step_ms=ms, measured_step_peak_gib=1.0, predicted_step_peak_gib=1.0,
                    stall_ms=0.0, peak_phase="backward", holders=[])

    def table(graphs):
        row = _row("offload:auto", 1.0)
        row.extra.update(predicted_baseline_step_ms=9.5, measured_vs_predicted=graphs)
        return zoo.model_table(zoo.MODELS["gpt"], [_row("inductor", 1.0), row])

    one = table([measured(0, 9.0), measured(1, 9.9, replaces=0, reverted=True)])
    assert "this row's step 10.0 ms against 9.0 ms the backend timed of its plan in force" in one
    assert "against" not in table([measured(0, 4.0), measured(1, 5.0)]).split("as the inductor row measured it")[1]
