"""``benchmarks/memory_peak.py``: what holds the memory at a step's peak (needs CUDA to
run; its trace reading and its arguments are checked here, on the CPU)."""

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import memory_peak  # noqa: E402


def test_live_at_peak_names_what_was_live_and_where_each_is_freed():
    trace = [
        {"action": "alloc", "addr": 1, "size": 100},
        {"action": "alloc", "addr": 2, "size": 300},
        {"action": "free_requested", "addr": 1, "size": 100},
        {"action": "alloc", "addr": 3, "size": 50},   # 350 held: below the 400 before
        {"action": "alloc", "addr": 4, "size": 200},  # 550: the peak
        {"action": "free_requested", "addr": 4, "size": 200},
        {"action": "free_requested", "addr": 7, "size": 999},  # made before the trace: ignored
    ]
    peak, at, live = memory_peak.live_at_peak(trace)
    assert (peak, at) == (550, 4)
    assert sorted(a["addr"] for a, _ in live) == [2, 3, 4]
    freed = {a["addr"]: f for a, f in live}
    assert freed[4] is trace[5] and freed[2] is None and freed[3] is None


def test_predictions_are_those_of_the_plans_in_force_not_of_the_replaced_ones():
    # Session 37: a re-planned graph's first and second plans were summed (4.67 GiB
    # predicted for a 2.33 GiB plan).
    first = SimpleNamespace(predicted={"step_peak_bytes": 3 * 2**30, "activation_peak_bytes": 2**30})
    second = SimpleNamespace(predicted={"step_peak_bytes": 2 * 2**30, "activation_peak_bytes": 2**29})
    other = SimpleNamespace(predicted={"step_peak_bytes": 2**30, "activation_peak_bytes": 2**29})
    backend = SimpleNamespace(plans=[first, second, other], current_plans=[second, other])
    assert memory_peak.predicted(backend) == {"predicted_step_peak_gib": 3.0,
                                              "predicted_activation_gib": 1.0}


@pytest.mark.parametrize("argv, message", [
    (["--offload-options", "[1]"], "--offload-options: give a JSON object"),
    (["--offload-options", '{"memory_budget": 0.5}'], "memory_budget"),
])
def test_bad_options_are_refused_before_anything_runs(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        memory_peak.main(argv)
    assert e.value.code == 2
    assert message in capsys.readouterr().err
