"""Options: defaults, validation and clear errors."""

import logging
import re

import pytest
import torch

import offload_compiler
from offload_compiler import OffloadConfig
from offload_compiler.config import option_names


def test_defaults():
    c = OffloadConfig()
    assert c.inner_compiler == "inductor" and c.policy == "cost_model"
    assert c.memory_budget == "auto" and c.max_overhead == 0.03 and c.hardware is None
    assert c.devices == ("cuda",) and c.min_offload_bytes == 1 << 20
    assert c.max_host_bytes is None and c.prefetch_depth == 1
    assert c.copy_margin == 0.15 and c.node_costs == "estimate"


def test_from_options_and_frozen():
    c = OffloadConfig.from_options({"devices": ["cpu"], "policy": "none"})
    assert c.devices == ("cpu",) and c.policy == "none"
    with pytest.raises(Exception):
        c.policy = "all"
    assert hash(c) == hash(OffloadConfig(devices=("cpu",), policy="none"))


@pytest.mark.parametrize("options,fragment", [
    ({"polcy": "all"}, "valid options are"),
    ({"policy": "some"}, "('cost_model', 'all', 'none')"),
    ({"memory_budget": 1.5}, "fraction in (0, 1]"),
    ({"memory_budget": "half"}, '"auto"'),
    ({"memory_budget": True}, "bytes with a unit"),
    ({"memory_budget": 1}, "For no change write 1.0"),
    ({"memory_budget": 4096}, 'memory_budget="4KiB"'),
    ({"memory_budget": "4096"}, "has no unit"),
    ({"memory_budget": "12 parsecs"}, "bytes with a unit"),
    ({"max_overhead": -0.1}, "non-negative number"),
    ({"hardware": {"pcie": 1}}, "valid keys are"),
    ({"hardware": {"d2h_gbps": 0}}, "positive number"),
    ({"hardware": {"copy_slowdown": 1.0}}, "number in [0, 1)"),
    ({"hardware": {"copy_slowdown": -0.01}}, "number in [0, 1)"),
    ({"inner_compiler": "tvm"}, "('inductor', 'eager')"),
    ({"devices": ("tpu",)}, "('cuda', 'cpu')"),
    ({"devices": ()}, "non-empty"),
    ({"devices": ("cpu", "cpu")}, "twice"),
    ({"min_offload_bytes": -1}, "non-negative integer"),
    ({"min_offload_bytes": 1.5}, "non-negative integer"),
    ({"max_host_bytes": -5}, "non-negative integer or bytes with a unit (B, KiB"),
    ({"max_host_bytes": "1 gigabyte"}, "give bytes with a unit"),
    ({"min_offload_bytes": "16"}, "give bytes with a unit"),
    ({"prefetch_depth": "2MiB"}, "must be a non-negative integer"),
    ({"prefetch_depth": True}, "non-negative integer"),
    ({"copy_margin": 1.0}, "number in [0, 1)"),
    ({"copy_margin": -0.1}, "number in [0, 1)"),
    ({"copy_margin": "15%"}, "number in [0, 1)"),
    ({"node_costs": "measure"}, "('estimate', 'profile')"),
])
def test_bad_options_name_the_valid_values(options, fragment):
    with pytest.raises(ValueError) as err:
        OffloadConfig.from_options(options)
    assert fragment in str(err.value)


def test_byte_options_take_units_and_store_the_count():
    """``*_bytes`` options take bytes with a unit, as users write them, and store the
    count: the same config (and fingerprint) as the number."""
    with_units = OffloadConfig(min_offload_bytes="16MiB", max_host_bytes="1.5GB")
    counts = OffloadConfig(min_offload_bytes=16 << 20, max_host_bytes=1_500_000_000)
    assert with_units == counts and with_units.fingerprint() == counts.fingerprint()
    assert type(with_units.min_offload_bytes) is int and type(with_units.max_host_bytes) is int


def test_unknown_option_lists_every_valid_key():
    with pytest.raises(ValueError) as err:
        OffloadConfig.from_options({"nope": 1})
    for name in option_names():
        assert name in str(err.value)


def test_bad_option_through_torch_compile_raises_value_error():
    model = torch.nn.Linear(4, 4)
    compiled = torch.compile(model, backend="offload", options={"policy": "bogus"})
    with pytest.raises(Exception) as err:
        compiled(torch.randn(2, 4))
    assert "policy='bogus' is not valid" in str(err.value)


def test_unsupported_mode_is_refused():
    backend = offload_compiler.make_backend(devices=("cpu",))
    with pytest.raises(ValueError, match="valid modes"):
        backend(None, [], mode="fast")


def test_make_backend_takes_config_dict_or_keywords():
    assert offload_compiler.make_backend(OffloadConfig(policy="none")).config.policy == "none"
    assert offload_compiler.make_backend({"policy": "none"}).config.policy == "none"
    assert offload_compiler.make_backend(policy="none").config.policy == "none"
    with pytest.raises(ValueError, match="not both"):
        offload_compiler.make_backend(OffloadConfig(), policy="none")


def test_fingerprint_changes_with_options():
    assert OffloadConfig().fingerprint() != OffloadConfig(policy="none").fingerprint()
    assert OffloadConfig().fingerprint() == OffloadConfig().fingerprint()


def test_every_option_is_documented_in_the_readme():
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    missing = [name for name in option_names() if f"| `{name}` |" not in readme]
    assert not missing, f"options without a row in README.md's table: {missing}"


def test_copy_slowdown_of_zero_is_a_valid_override():
    c = OffloadConfig.from_options({"hardware": {"copy_slowdown": 0.0, "d2h_gbps": 20}})
    assert dict(c.hardware) == {"copy_slowdown": 0.0, "d2h_gbps": 20}


class _Layer(torch.nn.Module):
    """A block whose forward reads a Python int Dynamo guards on: one graph, compiled
    again for each value."""

    def __init__(self, index: int):
        super().__init__()
        self.index, self.linear = index, torch.nn.Linear(16, 16)

    def forward(self, x):
        return torch.relu(self.linear(x)) * (1.0 if self.index >= 0 else 2.0)


def test_a_graph_compiled_again_is_said_once_and_at_dynamos_recompile_limit(caplog, monkeypatch):
    monkeypatch.setattr(torch._dynamo.config, "recompile_limit", 4)
    torch._dynamo.reset()
    b = offload_compiler.make_backend(devices=("cpu",), inner_compiler="eager", min_offload_bytes=0)
    x = torch.randn(4, 16, requires_grad=True)
    with caplog.at_level(logging.WARNING, logger="offload_compiler"):
        for index in range(5):
            layer = _Layer(index)
            layer.compile(backend=b)
            layer(x).sum().backward()
    said = [r.getMessage() for r in caplog.records if "was compiled" in r.getMessage()]
    assert len(said) == 2 and "compiled 2 times" in said[0] and "compiled 4 times" in said[1]
    assert "recompile_limit (4)" in said[1] and "use_cache=False" in said[0]
    assert re.search(r"starts at test_config\.py:\d+ in forward", said[0])
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="offload_compiler"):  # a reset: a first compile again
        torch._dynamo.reset()
        layer = _Layer(0)
        layer.compile(backend=b)
        layer(x).sum().backward()
    assert not [r for r in caplog.records if "was compiled" in r.getMessage()]
