"""Issue 20: options refuse NaN, infinities and out-of-range numbers; accept NumPy numbers
and device strings with an index; the host pool gives idle memory back."""

import gc
import json

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
    (np.float32(0.5), 0.5),             # a real non-integral type is a fraction
    (np.float64(1.0), 1.0),
    (1.0, 1.0),                         # as before for Python numbers
    ("1MiB", 1 << 20),                  # bytes: a string with a unit
])
def test_memory_budget_real_is_fraction_bytes_need_a_unit(given, stored):
    budget = OffloadConfig(memory_budget=given).memory_budget
    assert budget == stored and isinstance(budget, type(stored))


@pytest.mark.parametrize("given", [np.int64(1 << 20), np.uint8(0), 3, 1])
def test_memory_budget_integers_are_refused_whatever_their_type(given):
    with pytest.raises(ValueError, match="an int is refused"):
        OffloadConfig(memory_budget=given)


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


# -- 4. the host pool gives memory back ----------------------------------------------------

from offload_compiler.runtime import pool as pool_module  # noqa: E402
from offload_compiler.runtime.pool import HostPool, host_pool  # noqa: E402

KIB = 1 << 10


def _step(pool, sizes):
    """One step's checkouts: host buffers of ``sizes`` bytes held together, then dropped
    (as backward drops the saved activations)."""
    held = [pool.acquire(torch.empty(n, dtype=torch.uint8, device="meta"), pinned=False)
            for n in sizes]
    assert all(h is not None for h in held)
    del held


def test_changing_shapes_keep_idle_bytes_within_the_most_checked_out(monkeypatch):
    """A shape that shrinks step by step: without a bound the pool kept every size class
    (64 + 32 + ... + 1 KiB, about twice what any step needs)."""
    monkeypatch.setattr(pool_module, "AUTO_MIN_IDLE_BYTES", 0)  # the bound is the peak alone
    pool = HostPool()
    for kib in (64, 32, 16, 8, 4, 2, 1):
        _step(pool, [kib * KIB])
    stats = pool.stats()
    assert stats.peak_in_use_bytes == 64 * KIB
    assert stats.in_use_bytes == 0 and stats.idle_bytes <= 64 * KIB
    assert stats.reserved_bytes == stats.idle_bytes <= 64 * KIB  # 127 KiB before
    assert stats.released_blocks > 0 and stats.max_idle_bytes == 64 * KIB


def test_peak_does_not_count_blocks_whose_tensors_died_unnoticed():
    """Step 3 takes an idle 8 KiB block without looking at the others, while step 2's
    4 KiB block, dead, still counts as checked out: the peak is still 8 KiB."""
    pool = HostPool()
    for kib in (8, 4, 8):
        _step(pool, [kib * KIB])
    assert pool.stats().peak_in_use_bytes == 8 * KIB


def test_explicit_bound_releases_least_recently_used_blocks_first():
    pool = HostPool(max_idle_bytes=24 * KIB)
    _step(pool, [16 * KIB])     # old shape
    _step(pool, [8 * KIB, 4 * KIB, 4 * KIB])   # new shape, 16 KiB in all
    stats = pool.stats()
    assert stats.idle_bytes <= 24 * KIB and stats.released_bytes == 16 * KIB
    allocations = stats.allocations
    _step(pool, [8 * KIB, 4 * KIB, 4 * KIB])   # the recent blocks were kept
    assert pool.stats().allocations == allocations


def test_max_idle_bytes_validated_and_read_from_the_environment(monkeypatch):
    pool = HostPool()
    for bad in (-1, 1.5, True, "lots"):
        with pytest.raises(ValueError, match="max_idle_bytes=.* is not valid; give \"auto\""):
            pool.max_idle_bytes = bad
    pool.max_idle_bytes = "2 MiB"
    assert pool.max_idle_bytes == 2 << 20
    pool.max_idle_bytes = np.int64(1 << 20)
    assert pool.max_idle_bytes == 1 << 20 and type(pool.max_idle_bytes) is int
    pool.max_idle_bytes = "auto"
    assert pool.max_idle_bytes is None
    monkeypatch.setenv(pool_module.MAX_IDLE_ENV, "256MiB")
    assert pool_module._pool_from_env().max_idle_bytes == 256 << 20
    monkeypatch.setenv(pool_module.MAX_IDLE_ENV, "auto")
    assert pool_module._pool_from_env().max_idle_bytes is None
    monkeypatch.setenv(pool_module.MAX_IDLE_ENV, "1.5 GB")
    assert pool_module._pool_from_env().max_idle_bytes == 1_500_000_000
    monkeypatch.setenv(pool_module.MAX_IDLE_ENV, "a lot")
    with pytest.raises(ValueError, match=pool_module.MAX_IDLE_ENV + "='a lot' is not valid"):
        pool_module._pool_from_env()


def test_lowering_the_bound_releases_idle_blocks_now():
    pool = HostPool()
    _step(pool, [4 * KIB, 4 * KIB, 8 * KIB])
    assert pool.stats().idle_bytes == 16 * KIB
    pool.max_idle_bytes = 8 * KIB
    assert pool.stats().idle_bytes <= 8 * KIB


def test_empty_releases_idle_blocks_and_leaves_checked_out_ones_alone():
    pool = HostPool()
    _step(pool, [4 * KIB, 8 * KIB])
    src = torch.arange(256, dtype=torch.float32)  # 1 KiB
    host, block = pool.acquire(src, pinned=False)
    host.copy_(src)
    assert pool.empty() == 12 * KIB
    stats = pool.stats()
    assert (stats.idle_bytes, stats.in_use_bytes, stats.reserved_bytes) == (0, 1 * KIB, 1 * KIB)
    assert torch.equal(host, src) and pool.lookup(host) is block  # untouched
    del host
    assert pool.stats().idle_bytes == 1 * KIB  # came back, kept (a graph may still use it)
    assert pool.empty() == 1 * KIB and pool.stats().reserved_bytes == 0


def test_releasing_pinned_blocks_unpins_the_cached_memory(monkeypatch):
    calls = []
    monkeypatch.setattr(pool_module, "_unpin_cached", lambda: calls.append(1))
    pool = HostPool()
    pool.allocator = lambda nbytes, pinned: torch.empty(nbytes, dtype=torch.uint8)  # CPU stand-in
    pool.acquire(torch.empty(1024, device="meta"), pinned=False)
    pool.empty()
    assert calls == []  # plain host memory: nothing to unpin
    pool.acquire(torch.empty(1024, device="meta"), pinned=True)
    pool.empty()
    assert calls == [1]


def test_release_waits_for_copies_only_off_the_steps_path(monkeypatch):
    """empty() waits for the copies that touched a pinned block before unpinning (torch's
    host cache would keep it otherwise); a release inside a step's acquire never waits."""
    monkeypatch.setattr(pool_module, "_unpin_cached", lambda: None)
    waited = []

    class Event:
        def synchronize(self):
            waited.append(self)

    pool = HostPool(max_idle_bytes=0)
    pool.allocator = lambda nbytes, pinned: torch.empty(nbytes, dtype=torch.uint8)  # CPU stand-in
    host, block = pool.acquire(torch.empty(1024, device="meta"), pinned=True)
    block.ready_event = Event()
    del host
    second = pool.acquire(torch.empty(4096, device="meta"), pinned=True)  # releases the idle one
    assert pool.stats().released_blocks == 1 and waited == []
    del second
    pool.max_idle_bytes = "auto"
    host, block = pool.acquire(torch.empty(1024, device="meta"), pinned=True)
    block.events = [Event()]
    del host
    pool.empty()
    assert waited == block.events


@pytest.fixture
def fresh_pool(monkeypatch):
    """A process-wide pool of its own for a test of when the pool releases: graphs earlier
    tests compiled and that something still holds (a report, a cache) would count as alive
    in the shared one."""
    from offload_compiler.runtime import pool as pool_module

    monkeypatch.setattr(pool_module, "_pool", pool_module._pool_from_env())
    return pool_module._pool


def _offloading_model():
    torch._dynamo.reset()  # graphs compiled by earlier tests are not alive any more
    gc.collect()
    b = backend(**loopback(inner_compiler="eager"))
    model = NormGeluMLP()
    return b, model, torch.compile(model, backend=b)


def test_idle_memory_returned_when_the_compiled_model_is_deleted(fresh_pool):
    pool = host_pool()
    b, model, compiled = _offloading_model()
    for _ in range(2):
        compiled(torch.randn(8, 32)).backward()
    assert sum(p.offloaded_bytes for p in b.plans) > 0
    assert pool.stats().idle_bytes > 0
    kept = compiled(torch.randn(8, 32))  # a forward whose saved tensors are still alive
    assert pool.stats().in_use_bytes > 0
    del compiled, model
    gc.collect()
    assert pool.stats().in_use_bytes > 0  # in use: never released
    kept.backward()
    del kept  # the last reference to the model's parameters (its autograd graph)
    gc.collect()
    stats = pool.stats()
    assert (stats.idle_bytes, stats.in_use_bytes, stats.reserved_bytes) == (0, 0, 0)


def test_a_cached_graph_run_by_a_new_model_keeps_its_blocks_between_steps(fresh_pool):
    """Dynamo keeps the graph in its cache and runs it for another instance of the same
    class without compiling again: the pool must not go on releasing every step."""
    pool = host_pool()
    b, model, compiled = _offloading_model()
    compiled(torch.randn(8, 32)).backward()
    del compiled, model
    gc.collect()
    assert pool.stats().reserved_bytes == 0
    compiled = torch.compile(NormGeluMLP(), backend=b)
    compiled(torch.randn(8, 32)).backward()
    before = pool.stats()
    for _ in range(3):
        compiled(torch.randn(8, 32)).backward()
    after = pool.stats()
    assert len(b.plans) == 1, "expected the cached graph to be reused"
    assert after.allocations == before.allocations and after.released_blocks == before.released_blocks
    assert after.idle_bytes > 0


def test_empty_host_pool_is_public_and_safe_during_training():
    import offload_compiler

    pool = host_pool()
    b, model, compiled = _offloading_model()
    x = torch.randn(8, 32)
    loss = compiled(x)
    offload_compiler.empty_host_pool()  # saved activations are in host blocks: kept
    assert pool.stats().in_use_bytes > 0
    loss.backward()
    got = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(x).backward()
    for g, want in zip(got, [p.grad for p in model.parameters()]):
        assert torch.equal(g, want)
    assert offload_compiler.empty_host_pool() > 0 and pool.stats().idle_bytes == 0


def test_auto_bound_never_releases_a_steady_steps_blocks(monkeypatch):
    """Same shapes every step: after the first step nothing is allocated or released,
    even with the auto bound at its tightest (no 64 MiB floor)."""
    monkeypatch.setattr(pool_module, "AUTO_MIN_IDLE_BYTES", 0)
    pool = host_pool()
    b, model, compiled = _offloading_model()
    x = torch.randn(8, 32)
    compiled(x).backward()
    before = pool.stats()
    for _ in range(4):
        compiled(x).backward()
    after = pool.stats()
    assert after.allocations == before.allocations
    assert after.released_blocks == before.released_blocks
    assert after.idle_bytes == before.idle_bytes > 0


def test_auto_bound_with_changing_sequence_lengths(monkeypatch):
    monkeypatch.setattr(pool_module, "AUTO_MIN_IDLE_BYTES", 0)
    pool = host_pool()
    b, model, compiled = _offloading_model()
    for t in (64, 8, 48, 16, 32, 4, 24, 12):
        x = torch.randn(2, t, 32)
        torch._dynamo.mark_dynamic(x, 1)
        compiled(x).backward()
    stats = pool.stats()
    assert stats.released_blocks > 0
    assert stats.in_use_bytes == 0 and stats.reserved_bytes <= stats.peak_in_use_bytes


def test_idle_blocks_of_one_size_are_released_least_recently_used_first():
    """Two idle blocks of one size, the least recently used second in the pool's list:
    releasing it compared blocks by value (their tensors), which raised "Boolean value
    of Tensor with more than one value is ambiguous" and left the pool half-updated."""
    pool = HostPool()
    like = torch.empty(4096, dtype=torch.uint8)
    a_host, a = pool.acquire(like, pinned=False)
    b_host, b = pool.acquire(like, pinned=False)
    del b_host  # b goes back first: first in the list of idle blocks of its size
    pool.stats()
    del a_host
    pool.stats()
    a.last_used, b.last_used = 1, 2  # a, second in the list, is the least recently used
    pool.max_idle_bytes = a.nbytes  # one block past the bound
    stats = pool.stats()
    assert stats.released_blocks == 1 and stats.idle_bytes == b.nbytes
    assert pool.acquire(like, pinned=False)[1] is b
