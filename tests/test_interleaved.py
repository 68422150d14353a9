"""``benchmarks/interleaved.py``: strategies compiled in one process, timed in rotated
rounds, each round's step paired with the first strategy's (CPU)."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import interleaved  # noqa: E402

FACTORY = '''
import torch
from torch import nn

def make():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 256), nn.GELU(), nn.Linear(256, 1))
    return model, (torch.randn(32, 64),)
'''


def test_rounds_are_paired_with_the_first_strategy_and_written(tmp_path, capsys):
    factory = tmp_path / "tiny_mlp.py"
    factory.write_text(FACTORY)
    out = tmp_path / "rounds.json"
    rc = interleaved.main(["--model", f"{factory}:make", "--device", "cpu", "--dtype", "float32",
                           "--strategies", "inductor,offload:none,offload:0.5", "--rounds", "3",
                           "--steps", "1", "--warmup", "1", "--json", str(out)])
    printed = capsys.readouterr().out
    assert rc == 0, printed
    got = json.loads(out.read_text())
    assert list(got) == ["inductor", "offload:none", "offload:0.5"]
    for s, g in got.items():
        assert len(g["step_ms"]) == len(g["host_ms"]) == len(g["ratio"]) == 3
        assert all(ms > 0 for ms in g["step_ms"] + g["host_ms"])
        assert g["ratio"] == pytest.approx([a / b for a, b in zip(g["step_ms"], got["inductor"]["step_ms"])])
    assert got["inductor"]["ratio"] == [1.0, 1.0, 1.0]
    # Each round rotates the order, and says its steps; the table names every strategy.
    assert printed.count("interleaved: round ") == 3
    table = printed[printed.index("strategy"):]
    assert "x inductor (paired)" in table and "offload:none" in table and "offload:0.5" in table
    assert "act GiB" not in table and "act_gib" not in got["inductor"]  # measured on CUDA only


def test_each_synchronised_step_records_its_activation_memory(tmp_path):
    # The meter (on CUDA, the allocator's peak less what was allocated before) brackets
    # each round's synchronised step of each strategy, not the back-to-back steps.
    import torch

    factory = tmp_path / "tiny_mlp.py"
    factory.write_text(FACTORY)
    from offload_compiler.reporting.explain_cli import load_factory

    model, (x,) = load_factory(f"{factory}:make")()
    calls = []

    def begin():
        calls.append("begin")
        return 5 * 2**30

    def end(before):
        calls.append("end")
        return before // 5 * (2 if len(calls) % 4 == 0 else 1)  # 1 GiB, 2 GiB, 1 GiB, ...

    torch._dynamo.reset()
    got = interleaved.interleave(model, (x,), {}, ["inductor", "offload:none"], rounds=2, steps=2, warmup=1,
                                 device="cpu", meter=(begin, end), say=lambda _: None)
    assert calls == ["begin", "end"] * 4
    assert sorted(got["inductor"]["act_gib"] + got["offload:none"]["act_gib"]) == [1.0, 1.0, 2.0, 2.0]
    for s in ("inductor", "offload:none"):  # each round's collections (often none): a count and their ms
        assert [(type(n), type(ms)) for n, ms in got[s]["gc"]] == [(int, float)] * 2, got[s]["gc"]
    table = interleaved.table(got)
    assert "act GiB" in table and "x inductor act" in table and "above what was allocated" in table



BLOCKS_FACTORY = '''
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64))
                                    for _ in range(3))
        self.head = nn.Linear(64, 1)

    def forward(self, x):
        for block in self.blocks:
            x = x + block(x)
        return self.head(x).mean()

def make():
    torch.manual_seed(0)
    return Net(), (torch.randn(32, 64),)
'''


def test_sac_and_full_ac_run_on_a_copy_with_their_blocks_checkpointed(tmp_path, capsys):
    """``sac`` and ``full_ac`` compile a copy of the model (the same weights) whose blocks
    run under checkpointing, as ``compare`` wraps them; the reference model is untouched."""
    import torch

    factory = tmp_path / "blocks.py"
    factory.write_text(BLOCKS_FACTORY)
    from offload_compiler.reporting.explain_cli import load_factory

    model, (x,) = load_factory(f"{factory}:make")()
    forward = model.blocks[0].forward
    twin = interleaved.strategy_model("full_ac", model, "blocks")
    assert twin is not model and model.blocks[0].forward == forward  # the original unwrapped
    assert twin.blocks[0].forward != twin.blocks[0].__class__.forward.__get__(twin.blocks[0])
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), twin.parameters()))
    assert interleaved.strategy_model("inductor", model, "blocks") is model
    rc = interleaved.main(["--model", f"{factory}:make", "--device", "cpu", "--dtype", "float32",
                           "--strategies", "inductor,sac,full_ac", "--blocks", "blocks", "--rounds", "1",
                           "--steps", "1", "--warmup", "1"])
    printed = capsys.readouterr().out
    assert rc == 0, printed
    table = printed[printed.index("strategy"):]
    assert "sac" in table and "full_ac" in table
    with pytest.raises(SystemExit):
        interleaved.main(["--model", f"{factory}:make", "--device", "cpu", "--strategies", "inductor,sac",
                          "--blocks", "nowhere"])
    assert "--blocks 'nowhere': the model has no such attribute" in capsys.readouterr().err


def test_host_profile_lists_each_strategys_functions_by_own_and_the_backends_by_cumulative_time(tmp_path, capsys):
    factory = tmp_path / "tiny_mlp.py"
    factory.write_text(FACTORY)
    out = tmp_path / "rounds.json"
    rc = interleaved.main(["--model", f"{factory}:make", "--device", "cpu", "--dtype", "float32",
                           "--strategies", "inductor,offload:none", "--rounds", "1", "--steps", "1",
                           "--warmup", "1", "--host-profile", "2", "--json", str(out)])
    printed = capsys.readouterr().out
    assert rc == 0, printed
    got = json.loads(out.read_text())
    for s in ("inductor", "offload:none"):
        profile = got[s]["profile"]
        assert profile.startswith("2 synchronised steps")
        assert "Ordered by: internal time" in profile and "tottime" in profile
        assert "backward" in profile  # the step's own calls are in it
        ours = profile.split("the backend's functions and the graphs' generated code, by cumulative time:")[1]
        assert "Ordered by: cumulative time" in ours and "torchinductor" in ours  # the graphs' generated code
        assert f"--- {s}: the host's time by function ---" in printed
    assert "offload_compiler" in got["offload:none"]["profile"].split("by cumulative time:")[1]
    # The table is still printed last.
    assert printed.rstrip().endswith("to issue a synchronised step")


@pytest.mark.parametrize("argv, message", [
    (["--strategies", "inductor,sca"], "unknown strategy 'sca'; valid strategies: inductor, sac, full_ac, offload:auto"),
    (["--strategies", "inductor,offload:none", "--blocks", "layers"], "neither is in --strategies"),
    (["--strategies", "offload:magic"], "unknown strategy 'offload:magic'"),
    (["--strategies", "inductor,inductor"], "give each strategy once"),
    (["--offload-options", '{"copy_margin": 2}'], "copy_margin"),
    (["--offload-options", "[1]"], "give a JSON object"),
    (["--rounds", "0"], "must be at least 1"),
    (["--host-profile", "-1"], "--host-profile must be 0 (off) or more steps; got -1"),
])
def test_bad_arguments_stop_before_anything_compiles(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        interleaved.main(["--model", "nowhere:make", "--device", "cpu", *argv])
    assert e.value.code == 2
    assert message in capsys.readouterr().err
