"""Issue 20: options refuse NaN, infinities and out-of-range numbers; accept NumPy numbers
and device strings with an index; the host pool gives idle memory back."""

import gc
import json
import math

import pytest
import torch

from helpers import backend, loopback
from models import NormGeluMLP
from offload_compiler import OffloadConfig

np = pytest.importorskip("numpy")

NAN, INF = float("nan"), float("inf")


# -- 1. every float option and hardware override is finite and in its range ------------

@pytest.mark.parametrize("options,shown,valid_range", [
    ({"max_overhead": NAN}, "max_overhead=nan", "[0, inf)"),
    ({"max_overhead": INF}, "max_overhead=inf", "[0, inf)"),
    ({"max_overhead": np.float32(NAN)}, "max_overhead=np.float32(nan)", "[0, inf)"),
    ({"copy_margin": NAN}, "copy_margin=nan", "[0, 1)"),
    ({"copy_margin": -INF}, "copy_margin=-inf", "[0, 1)"),
    ({"memory_budget": NAN}, "memory_budget=nan", "(0, 1]"),
    ({"memory_budget": np.float64(INF)}, "memory_budget=", "(0, 1]"),
    ({"hardware": {"d2h_gbps": NAN}}, "hardware['d2h_gbps']=nan", "(0, inf)"),
    ({"hardware": {"d2h_gbps": INF}}, "hardware['d2h_gbps']=inf", "(0, inf)"),
    ({"hardware": {"matmul_tflops": np.float32(INF)}}, "hardware['matmul_tflops']=", "(0, inf)"),
    ({"hardware": {"launch_us": -INF}}, "hardware['launch_us']=-inf", "(0, inf)"),
    ({"hardware": {"copy_slowdown": NAN}}, "hardware['copy_slowdown']=nan", "[0, 1)"),
])
def test_non_finite_numbers_are_refused_naming_option_value_and_range(options, shown, valid_range):
    with pytest.raises(ValueError) as err:
        OffloadConfig.from_options(options)
    message = str(err.value)
    assert shown in message and valid_range in message, message


@pytest.mark.parametrize("options,valid_range", [
    ({"max_overhead": -0.5}, "[0, inf)"),
    ({"copy_margin": 1.0}, "[0, 1)"),
    ({"hardware": {"h2d_gbps": 0.0}}, "(0, inf)"),
    ({"hardware": {"copy_slowdown": np.float32(1.0)}}, "[0, 1)"),
])
def test_out_of_range_numbers_name_the_range(options, valid_range):
    with pytest.raises(ValueError, match="is not valid") as err:
        OffloadConfig.from_options(options)
    assert valid_range in str(err.value)


# -- 2. NumPy numbers are accepted and stored as Python numbers --------------------------

def _numpy_and_python_options():
    numpy_options = {
        "max_overhead": np.float32(0.5), "copy_margin": np.float16(0.25),
        "memory_budget": np.float32(0.5), "min_offload_bytes": np.int64(4096),
        "max_host_bytes": np.uint32(1 << 30), "prefetch_depth": np.int8(2),
        "hardware": {"d2h_gbps": np.float32(20.0), "launch_us": np.int64(3),
                     "copy_slowdown": np.float64(0.125)},
    }
    python_options = {
        "max_overhead": 0.5, "copy_margin": 0.25, "memory_budget": 0.5,
        "min_offload_bytes": 4096, "max_host_bytes": 1 << 30, "prefetch_depth": 2,
        "hardware": {"d2h_gbps": 20.0, "launch_us": 3.0, "copy_slowdown": 0.125},
    }
    return numpy_options, python_options


def test_numpy_numbers_are_accepted_and_stored_as_python_numbers():
    numpy_options, python_options = _numpy_and_python_options()
    from_numpy = OffloadConfig.from_options(numpy_options)
    from_python = OffloadConfig.from_options(python_options)
    assert from_numpy == from_python
    assert from_numpy.fingerprint() == from_python.fingerprint()
    assert json.dumps(from_numpy.as_dict()) == json.dumps(from_python.as_dict())
    for name in ("max_overhead", "copy_margin", "memory_budget"):
        assert type(getattr(from_numpy, name)) is float, name
    for name in ("min_offload_bytes", "max_host_bytes", "prefetch_depth"):
        assert type(getattr(from_numpy, name)) is int, name
    assert all(type(v) is float for _, v in from_numpy.hardware)


def test_int_and_float_options_are_stored_with_one_type_whatever_was_given():
    """0 and 0.0 are the same max_overhead: the same fingerprint."""
    assert OffloadConfig(max_overhead=0).fingerprint() == OffloadConfig(max_overhead=0.0).fingerprint()
    assert type(OffloadConfig(copy_margin=0).copy_margin) is float


@pytest.mark.parametrize("given,stored", [
    (np.int64(1 << 20), 1 << 20),       # an integer value is bytes
    (np.uint8(0), 0),
    (np.float32(0.5), 0.5),             # a real non-integral type is a fraction
    (np.float64(1.0), 1.0),
    (1.0, 1.0),                         # as before for Python numbers
    (3, 3),
])
def test_memory_budget_integral_is_bytes_real_is_fraction(given, stored):
    budget = OffloadConfig(memory_budget=given).memory_budget
    assert budget == stored and type(budget) is type(stored)


@pytest.mark.parametrize("options", [
    {"memory_budget": np.float32(1.5)},
    {"memory_budget": np.int64(-1)},
    {"memory_budget": np.bool_(True)},
    {"min_offload_bytes": np.float32(4.0)},
    {"min_offload_bytes": np.int64(-1)},
    {"prefetch_depth": np.bool_(True)},
    {"max_host_bytes": np.float64(1e9)},
])
def test_numpy_values_of_the_wrong_kind_are_still_refused(options):
    with pytest.raises(ValueError, match="is not valid"):
        OffloadConfig.from_options(options)


# -- 3. devices: "type:index" strings and torch.device objects ---------------------------

@pytest.mark.parametrize("given,stored", [
    (("cuda:0",), ("cuda",)),
    ("cuda:1", ("cuda",)),
    ((torch.device("cuda", 0), "cpu"), ("cuda", "cpu")),
    (torch.device("cpu"), ("cpu",)),
    ([torch.device("cuda")], ("cuda",)),
])
def test_devices_accept_indices_and_torch_devices_and_store_types(given, stored):
    config = OffloadConfig(devices=given)
    assert config.devices == stored
    assert config.fingerprint() == OffloadConfig(devices=stored).fingerprint()


@pytest.mark.parametrize("given,fragment", [
    (("tpu:0",), "('cuda', 'cpu')"),
    ((torch.device("meta"),), "('cuda', 'cpu')"),
    (("cuda:x",), "('cuda', 'cpu')"),
    ((3,), "('cuda', 'cpu')"),
    (("cuda:0", "cuda:1"), "'cuda' twice"),
    (("cpu", torch.device("cpu")), "'cpu' twice"),
])
def test_unknown_or_repeated_device_types_are_refused(given, fragment):
    with pytest.raises(ValueError) as err:
        OffloadConfig(devices=given)
    assert fragment in str(err.value)


def test_torch_device_option_offloads_through_torch_compile():
    b = backend(**loopback(inner_compiler="eager", devices=(torch.device("cpu"),)))
    model = NormGeluMLP()
    torch.compile(model, backend=b)(torch.randn(8, 32)).backward()
    assert b.config.devices == ("cpu",)
    assert sum(p.offloaded_bytes for p in b.plans) > 0
