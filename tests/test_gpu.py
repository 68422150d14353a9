"""GPU tests (marked ``gpu``; skipped without CUDA). Run on the lent H100 before resolving
anything that touches runtime behaviour: ``pytest -m gpu``."""

import contextlib
import copy
import logging

import pytest
import torch
from torch._inductor.utils import run_and_get_code
from torch.nn.attention import SDPBackend, sdpa_kernel

from offload_compiler.runtime import host_pool, measure, streams
from offload_compiler.models.gpt import GPT, make_batch, preset
from helpers import as_dispatched, assert_bitwise, assert_close, backend
from models import ConvNet, SlicedConv
from offload_compiler.replanning import SETTLE_STEPS, TIMED_CALLS

pytestmark = pytest.mark.gpu

# Activations of 8-32 MiB in bf16: each copy takes a fraction of a millisecond to ms.
CFG = preset("tiny", vocab_size=4096, seq_len=1024, n_layers=3, d_model=1024, n_heads=8, batch_size=8)


def _model(dropout=0.0):
    torch.manual_seed(0)
    return GPT(preset("tiny", **{**CFG.__dict__, "dropout": dropout})).cuda().to(torch.bfloat16)


def _steps(model, compiled_backend, steps, *, stream=None, delay_compute=0):
    """Train ``steps`` steps; returns (losses, grads per step)."""
    torch._dynamo.reset()
    model = copy.deepcopy(model)
    compiled = torch.compile(model, backend=compiled_backend)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    idx, tgt = make_batch(CFG, "cuda")
    losses, grads = [], []
    if stream is not None:
        stream.wait_stream(torch.cuda.current_stream())  # the batch was made on the default stream
    ctx = torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()
    with ctx, sdpa_kernel(SDPBackend.MATH):  # deterministic attention for bitwise checks
        for step in range(steps):
            torch.manual_seed(step)
            loss = compiled(idx, tgt)
            if delay_compute:
                torch.cuda._sleep(delay_compute)
            loss.backward()
            losses.append(loss.detach().clone())
            grads.append([p.grad.detach().clone() for p in model.parameters()])
            opt.step()
            opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    return losses, grads


def _eager(policy):
    return backend(inner_compiler="eager", policy=policy)


def test_parity_eager_bitwise():
    model = _model()
    assert_bitwise(_steps(model, _eager("none"), 3), _steps(model, _eager("all"), 3))


def test_parity_inductor_tolerance():
    model = _model()
    b = backend(policy="all")
    got = _steps(model, b, 3)
    assert sum(p.offloaded_bytes for p in b.plans) > 0
    assert_close(_steps(model, backend(policy="none"), 3), got, rtol=2e-2, atol=2e-2)


def test_race_stress_delayed_copy_streams_bitwise():
    model = _model(dropout=0.1)
    ref = _steps(model, _eager("none"), 12)
    # Spin each copy stream ~1 ms before each copy and the compute stream before
    # backward: a missing wait anywhere becomes a wrong gradient.
    streams.set_copy_delay(d2h=2_000_000, h2d=2_000_000)
    try:
        got = _steps(model, _eager("all"), 12, delay_compute=5_000_000)
    finally:
        streams.set_copy_delay()
    assert_bitwise(ref, got)


def test_whole_step_under_non_default_stream():
    model = _model()
    ref = _steps(model, _eager("none"), 3)
    side = torch.cuda.Stream()
    streams.set_copy_delay(d2h=1_000_000, h2d=1_000_000)
    try:
        got = _steps(model, _eager("all"), 3, stream=side)
    finally:
        streams.set_copy_delay()
    assert_bitwise(ref, got)


def _conv_grads(make=None, steps=1, seed=0, delay=2_000_000, **options):
    """``steps`` steps of an NCHW conv net (``make()``; ConvNet by default) on CUDA,
    Inductor's layout optimization on (it lays the activations out channels-last), each
    copy stream spun ``delay`` cycles (the default ~1 ms) before each copy: the last
    step's loss and gradients as ``_steps`` gives them, and the forward's code. The last
    step's input is drawn from ``seed``, every other step's from a seed of its own. Each
    host block is filled with NaN bytes as a copy takes it (after a device synchronize:
    no earlier copy still reads it): a read of a host copy before its copy ends reads
    NaN."""
    from offload_compiler.runtime.pool import HostPool

    def poisoned(pool, like, **kwargs):
        got = acquire(pool, like, **kwargs)
        if got is not None:
            torch.cuda.synchronize()
            got[1].buffer.view(torch.uint8).fill_(255)
        return got

    torch._dynamo.reset()
    torch.manual_seed(0)
    model = (make or (lambda: ConvNet(channels=32, size=64)))().cuda()
    compiled = torch.compile(model, backend=backend(min_offload_bytes=64 << 10, **options))
    streams.set_copy_delay(d2h=delay, h2d=delay)
    acquire, HostPool.acquire = HostPool.acquire, poisoned
    try:
        with torch._inductor.config.patch(force_disable_caches=True, force_layout_optimization=True):
            for step in range(steps):
                model.zero_grad(set_to_none=True)
                torch.manual_seed(seed + steps - 1 - step)
                x = torch.randn(16, 3, 64, 64, device="cuda")
                if step == 0:
                    loss, (code, *_) = run_and_get_code(lambda: compiled(x).square().mean())
                else:
                    loss = compiled(x).square().mean()
                loss.backward()
    finally:
        streams.set_copy_delay()
        HostPool.acquire = acquire
    torch.cuda.synchronize()
    return ([loss.detach()], [[p.grad for p in model.parameters()]]), as_dispatched(code)


def test_no_kernel_reads_a_host_copy_before_its_copy_ends():
    """The host copies of conv nets whose activations Inductor lays out otherwise than
    the graph (SlicedConv's slice with gaps had two such kernels before, one the fused
    sine): no kernel reads one, and the gradients are right with the copies delayed and
    every host block filled with NaN as a copy takes it (``_conv_grads``). Passed on an
    H100 before the NaN fill (``benchmarks/RESULTS.md``, session 47)."""
    from test_graph import _kernels_reading_host_copies

    for make in (SlicedConv, lambda: ConvNet(channels=32, size=64)):
        ref, _ = _conv_grads(make, policy="none")
        got, code = _conv_grads(make, 2, policy="all")
        assert code.count("offload.d2h.default(") >= 2 and not _kernels_reading_host_copies(code)
        assert_close(got, ref, rtol=2e-2, atol=2e-2)


def test_a_kernel_reading_a_host_copy_reads_it_before_its_copy_ends(monkeypatch):
    """The hazard ``lowering.host_strides`` avoids and ``lowering.host_copies_untouched``
    refuses: with the copy's input kept in the graph's strides and the compile's check
    off, Inductor adds a kernel that reads a host copy, run on the host, before the
    delayed copy has filled it: it reads the NaN the block was filled with, and the
    gradients are wrong. On an H100 (session 47), without the NaN fill, this run got the
    gradients right twice (from values earlier runs, then its own first step, had left
    in the blocks, or because the host reached the kernel after the copy's ~1 ms delay:
    not told apart there), so the copies here are delayed ~100 ms each."""
    from offload_compiler import lowering
    from test_graph import _kernels_reading_host_copies

    monkeypatch.setattr(lowering, "host_strides", lambda node, prefer: list(node.args[0].meta["val"].stride()))
    monkeypatch.setattr(lowering, "host_copies_untouched", lambda nodes: nodes)
    ref, _ = _conv_grads(policy="none", seed=7)
    got, code = _conv_grads(steps=2, seed=7, delay=200_000_000, policy="all")
    print("\n".join(_kernels_reading_host_copies(code)))
    assert _kernels_reading_host_copies(code)
    with pytest.raises(AssertionError):
        assert_close(got, ref, rtol=2e-2, atol=2e-2)


def _peak_activation_bytes(model, b, steps=3):
    torch._dynamo.reset()
    model = copy.deepcopy(model)
    compiled = torch.compile(model, backend=b)
    idx, tgt = make_batch(CFG, "cuda")
    peaks = []
    for _ in range(steps):
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        compiled(idx, tgt).backward()
        torch.cuda.synchronize()
        peaks.append(torch.cuda.max_memory_allocated() - before)
        model.zero_grad(set_to_none=True)
    return peaks[-1]


def test_memory_drops_by_offloaded_bytes():
    model = _model()
    b_none, b_all = backend(policy="none"), backend(policy="all")
    base = _peak_activation_bytes(model, b_none)
    got = _peak_activation_bytes(model, b_all)
    offloaded = sum(p.offloaded_bytes for p in b_all.plans)
    print(f"activation peak none={base / 2**20:.0f} MiB all={got / 2**20:.0f} MiB "
          f"offloaded={offloaded / 2**20:.0f} MiB")
    assert offloaded > 0
    assert base - got >= 0.5 * offloaded


def test_memory_flat_over_1000_steps_and_no_pinned_allocation_after_warmup():
    cfg = preset("tiny", vocab_size=4096, seq_len=512, n_layers=2, d_model=1024, n_heads=8, batch_size=8)
    torch.manual_seed(0)
    m = GPT(cfg).cuda().to(torch.bfloat16)
    b = _eager("all")
    compiled = torch.compile(m, backend=b)
    opt = torch.optim.SGD(m.parameters(), lr=1e-4)
    idx, tgt = make_batch(cfg, "cuda")
    allocated, reserved, pool_allocs, pool_bytes = [], [], [], []
    for step in range(1000):
        compiled(idx, tgt).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step >= 2:
            allocated.append(torch.cuda.memory_allocated())
            reserved.append(torch.cuda.memory_reserved())
            stats = host_pool().stats()
            pool_allocs.append(stats.allocations)
            pool_bytes.append(stats.reserved_bytes)
    torch.cuda.synchronize()
    offloaded = sum(p.offloaded_bytes for p in b.plans)
    print(f"1000 steps: offloaded {offloaded / 2**20:.0f} MiB/step; allocated drift "
          f"{max(allocated) - min(allocated)} B, reserved drift {max(reserved) - min(reserved)} B, "
          f"pinned {pool_bytes[-1] / 2**20:.0f} MiB in {pool_allocs[-1]} blocks, "
          f"pinned drift {pool_bytes[-1] - pool_bytes[0]} B")
    assert offloaded > 0
    assert max(allocated) == min(allocated)
    assert max(reserved) == min(reserved)
    assert pool_allocs[0] == pool_allocs[-1], "pinned allocation after warm-up"
    assert pool_bytes[0] == pool_bytes[-1]
    for block in host_pool()._by_ptr.values():
        assert block.buffer.is_pinned()


def test_the_first_step_pins_nothing_on_its_path():
    """The plan's host blocks are pinned while the graph compiles (``runtime/prefill.py``):
    the first step's copies take prefilled blocks and pin none themselves."""
    from offload_compiler.runtime import empty_host_pool

    empty_host_pool()
    before = host_pool().stats()
    b = _eager("all")
    model = copy.deepcopy(_model())
    compiled = torch.compile(model, backend=b)
    idx, tgt = make_batch(CFG, "cuda")
    compiled(idx, tgt).backward()
    torch.cuda.synchronize()
    stats = host_pool().stats()
    offloaded = [d for p in b.plans for d in p.offloaded]
    prefilled = stats.prefilled_blocks - before.prefilled_blocks
    print(f"first step: {len(offloaded)} offloaded tensors, {prefilled} blocks prefilled, "
          f"{stats.allocations - before.allocations} allocated")
    assert offloaded and prefilled > 0
    assert stats.allocations - before.allocations == prefilled, "a block was pinned in the step"


def test_pinned_failure_keeps_tensor_on_gpu_and_gradients_right():
    model = _model()
    ref = _steps(model, _eager("none"), 2)
    pool = host_pool()
    pool.clear()

    def failing(nbytes, pinned):
        raise RuntimeError("injected: cudaHostAlloc failed")

    saved, pool.allocator = pool.allocator, failing
    try:
        before = pool.stats().failed_allocations
        got = _steps(model, _eager("all"), 2)
        assert pool.stats().failed_allocations > before
    finally:
        pool.allocator = saved
    assert_bitwise(ref, got)
    torch.ones(4, device="cuda").add_(1)  # no sticky CUDA error
    torch.cuda.synchronize()


def test_inductor_cuda_code_waits_before_reads_and_anchors_reloads():
    from test_graph import _h2d_waits_in_order

    model = _model()
    b = backend(policy="all")
    compiled = torch.compile(model, backend=b)
    idx, tgt = make_batch(CFG, "cuda")
    _, codes = run_and_get_code(lambda: compiled(idx, tgt).backward())
    fw_code, bw_code = as_dispatched(codes[0]), as_dispatched(codes[-1])
    n = len(b.plans[0].offloaded)
    assert n > 0
    assert fw_code.count("torch.ops.offload.d2h.default(") == n
    assert fw_code.count("torch.ops.offload.release.default(") == n
    assert _h2d_waits_in_order(bw_code) == n
    body = bw_code[bw_code.index("def call("):]
    first_kernel = min(i for i in (body.find("extern_kernels."), body.find(".run(")) if i >= 0)
    hoisted = body[:first_kernel].count("offload.h2d.default(")
    assert hoisted <= b.config.prefetch_depth, f"{hoisted} reloads hoisted to the top"
    # Reloads are fresh allocations: nothing that reads them is compiled as unaligned
    # (Triton kernels would lose their vectorized loads).
    assert "is assumed to be not aligned" not in bw_code


def _run_under_csan(*args):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "TORCH_CUDA_SANITIZER": "1",
           "PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.run([sys.executable, str(root / "tests" / "csan_transfer_check.py"), *args],
                          capture_output=True, text=True, env=env, timeout=300)


def test_transfer_ops_clean_under_cuda_sanitizer():
    out = _run_under_csan()
    assert out.returncode == 0 and "csan-clean" in out.stdout, out.stderr[-3000:]
    assert "data race" not in out.stderr


def test_cuda_sanitizer_catches_a_planted_race():
    out = _run_under_csan("--broken")
    assert out.returncode != 0 and "data race" in out.stderr, out.stderr[-3000:]


def test_mixed_dtypes_of_equal_size_share_pool_blocks_under_delays():
    """bf16 and fp16 models alternate steps: host blocks are reused across dtypes."""
    models = {dt: _model().to(dt) for dt in (torch.bfloat16, torch.float16)}
    refs = {dt: _steps(m, _eager("none"), 6) for dt, m in models.items()}
    torch._dynamo.reset()
    compiled, params, opts = {}, {}, {}
    for dt, m in models.items():
        mm = copy.deepcopy(m)
        params[dt] = mm
        compiled[dt] = torch.compile(mm, backend=_eager("all"))
        opts[dt] = torch.optim.SGD(mm.parameters(), lr=1e-3)
    idx, tgt = make_batch(CFG, "cuda")
    got = {dt: ([], []) for dt in models}
    streams.set_copy_delay(d2h=1_000_000, h2d=1_000_000)
    try:
        with sdpa_kernel(SDPBackend.MATH):
            for step in range(6):
                for dt in models:
                    torch.manual_seed(step)
                    loss = compiled[dt](idx, tgt)
                    loss.backward()
                    got[dt][0].append(loss.detach().clone())
                    got[dt][1].append([p.grad.detach().clone() for p in params[dt].parameters()])
                    opts[dt].step()
                    opts[dt].zero_grad(set_to_none=True)
    finally:
        streams.set_copy_delay()
    for dt in models:
        assert_bitwise(refs[dt], got[dt])


def test_real_failed_pinned_allocation_leaves_no_sticky_error(caplog):
    import logging

    model = _model()
    ref = _steps(model, _eager("none"), 2)
    pool = host_pool()
    pool.clear()
    pool._warned = False

    def absurd(nbytes, pinned):  # a real cudaHostAlloc failure
        return torch.empty(1 << 48, dtype=torch.uint8, pin_memory=pinned)

    saved, pool.allocator = pool.allocator, absurd
    try:
        with caplog.at_level(logging.WARNING):
            got = _steps(model, _eager("all"), 2)
    finally:
        pool.allocator = saved
    warnings = [r for r in caplog.records if "stay on the device" in r.getMessage()]
    assert len(warnings) == 1, "the fallback is said once"
    assert_bitwise(ref, got)
    x = torch.randn(1024, device="cuda")
    torch.testing.assert_close((x * 2).sum().item(), 2 * x.sum().item(), rtol=1e-5, atol=1e-3)
    torch.cuda.synchronize()


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_tensors_on_second_gpu_while_current_device_is_zero():
    torch.cuda.set_device(0)
    torch.manual_seed(0)
    model = GPT(CFG).to("cuda:1").to(torch.bfloat16)
    idx, tgt = make_batch(CFG, "cuda:1")

    def run(policy):
        torch._dynamo.reset()
        m = copy.deepcopy(model)
        c = torch.compile(m, backend=_eager(policy))
        with sdpa_kernel(SDPBackend.MATH):
            c(idx, tgt).backward()
        return [p.grad.clone() for p in m.parameters()]

    streams.set_copy_delay(d2h=1_000_000, h2d=1_000_000)
    try:
        got = run("all")
    finally:
        streams.set_copy_delay()
    for a, b in zip(run("none"), got):
        assert torch.equal(a, b)
    assert torch.cuda.current_device() == 0


def test_calibration_measures_real_kernels_even_under_fake_mode():
    from torch._subclasses.fake_tensor import FakeTensorMode

    from offload_compiler.planning.hardware import _plausible, calibrate

    # As inside the partitioner; in a math-only attention context, as the bitwise
    # tests compile: the cached profile must still time the fused attention kernels.
    with FakeTensorMode(), sdpa_kernel(SDPBackend.MATH):
        profile = calibrate(torch.device("cuda"))
    print(profile)
    assert _plausible(profile) and profile.name != "h100-design"
    assert 5 < profile.d2h_gbps < 200 and 5 < profile.h2d_gbps < 200
    assert profile.attention_tflops > 0.2 * profile.matmul_tflops
    assert profile.attention_backward_tflops > 0.2 * profile.matmul_tflops
    # Attention given a mask: a fused kernel takes one on the lent GPUs, and computes every score.
    assert 0.1 * profile.attention_tflops < profile.attention_masked_tflops <= 1.2 * profile.attention_tflops
    assert 0.1 * profile.attention_backward_tflops < profile.attention_masked_backward_tflops
    # Convolutions (cuDNN, channels-last bf16): measured, and no faster than matmuls can run.
    assert 0.02 * profile.matmul_tflops < profile.conv_tflops <= 1.2 * profile.matmul_tflops
    assert 0.02 * profile.matmul_tflops < profile.conv_backward_tflops <= 1.2 * profile.matmul_tflops


def test_cost_model_parity_and_memory_at_budgets():
    model = _model(dropout=0.1)
    ref = _steps(model, _eager("none"), 3)
    for budget in (0.5, "auto"):
        b = backend(inner_compiler="eager", policy="cost_model", memory_budget=budget)
        assert_bitwise(ref, _steps(model, b, 3))
        print(budget, b.plans[0].summary())


def test_profiling_mode_times_extern_kernels_and_keeps_gradients():
    from offload_compiler.planning import costs

    costs._timed.clear()
    model = _model()
    ref = _steps(model, _eager("none"), 2)
    b = backend(inner_compiler="eager", policy="cost_model", node_costs="profile", memory_budget=0.5)
    assert_bitwise(ref, _steps(model, b, 2))
    timed = {k: v for k, v in costs._timed.items() if v is not None}
    print(len(timed), "signatures timed;", sorted(timed.values())[-3:])
    ops = {k[0] for k in timed}
    # Attention runs as the math backend here (bitwise checks): bmm, mm and addmm.
    assert {"aten.mm.default", "aten.addmm.default", "aten.bmm.default"} <= ops, ops
    assert all(0 < v < 1000 for v in timed.values())
    estimate = backend(inner_compiler="eager", policy="cost_model", memory_budget=0.5)
    _steps(model, estimate, 1)
    # The plans differ only through node times: both were made, with predictions.
    assert b.plans[0].predicted["step_ms"] > 0 and estimate.plans[0].predicted["step_ms"] > 0
    print("profiled", b.plans[0].predicted["step_ms"], "estimated", estimate.plans[0].predicted["step_ms"])


def _act_of_one_step(compiled, model, idx, tgt):
    """(peak above what was held before the forward, absolute peak) of one step."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    compiled(idx, tgt).backward()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    model.zero_grad(set_to_none=True)
    return peak - before, peak


def test_measurement_matches_the_allocator_and_names_what_holds_the_peak():
    model = copy.deepcopy(_model())
    b = backend(memory_budget=0.5)
    compiled = torch.compile(model, backend=b)
    idx, tgt = make_batch(CFG, "cuda")
    for _ in range(SETTLE_STEPS):  # settled is vacuous before the first call: step first
        _act_of_one_step(compiled, model, idx, tgt)
        if b.settled:
            break
    assert b.settled
    act, _ = _act_of_one_step(compiled, model, idx, tgt)
    measured = [p for p in b.plans if p.measured is not None]
    assert measured, [p.summary() for p in b.plans]
    m = measured[-1].measured
    print(measured[-1].measured_text(), "| independent:", act / 2**20, "MiB |", m.holders[:3])
    assert m.fw_ms > 0 and m.bw_ms > 0 and m.held_before_bytes > 0
    assert m.peak_phase in ("forward", "backward") and m.holders
    assert abs(m.step_peak_bytes - act) <= 0.1 * act
    assert 0 < m.host_fw_ms and 0 < m.host_bw_ms  # the host's time to issue each phase
    if measured[-1].offloaded:
        assert m.d2h_bytes > 0 and m.h2d_bytes > 0 and m.d2h_gbps > 1
        n = len(measured[-1].offloaded)
        assert m.transfer_ops == (2 * n, 2 * n) and 0 < m.host_transfer_ms[0] < m.host_fw_ms


def test_the_measured_step_peak_is_what_max_memory_allocated_reads(caplog):
    """The allocator's statistics (``max_memory_allocated``, against which users and a
    ``memory_limit`` read the step) count its blocks, not the bytes requested: an 11.5
    MiB activation takes a 12 MiB segment whole, as under 1 MiB would remain. The
    measured step peak is rebuilt in those bytes from the allocator's layout."""
    width, batch = 1472, 2048  # 2048 x 1472 fp32: 11.5 MiB

    class Mlp(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.Sequential(*[m for _ in range(6) for m in
                                                (torch.nn.Linear(width, width), torch.nn.GELU())])

        def forward(self, x):
            return self.layers(x).square().mean()

    torch.manual_seed(0)
    torch.cuda.empty_cache()  # fresh segments: each activation's whole block is larger
    model = Mlp().cuda()
    compiled = torch.compile(model, backend=backend(inner_compiler="eager", memory_budget=0.5))
    x = torch.randn(batch, width, device="cuda")
    recorders, peaks = [], []

    class Keeping(measure.CudaSource):
        def recorder(self, device, call, what, intervals=0, **held):
            rec = super().recorder(device, call, what, intervals, **held)
            if rec is not None and what == "memory":
                recorders.append((len(peaks), rec))
            return rec

    measure.set_source(Keeping())
    try:
        with caplog.at_level(logging.INFO, logger="offload_compiler.runtime.history"):
            for _ in range(6):
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                compiled(x).backward()
                torch.cuda.synchronize()
                stats = torch.cuda.memory_stats()
                peaks.append((stats["allocated_bytes.all.peak"], stats["requested_bytes.all.peak"]))
                model.zero_grad(set_to_none=True)
    finally:
        measure.set_source(None)
    assert recorders
    for step, rec in recorders:
        m = rec.result()
        allocated, requested = peaks[step]
        total = m.held_before_bytes + m.step_peak_bytes
        print(f"step {step}: measured {total}, max_memory_allocated {allocated}, requested {requested}")
        # Blocks larger than their requests, by more than the bound below allows: a peak
        # rebuilt from the requests would fail it. (How much larger depends on the segments
        # the worker's earlier tests left cached: 0.94 MiB in session 32's suite.)
        assert allocated - requested >= 4 * (64 << 10)
        assert allocated - (64 << 10) <= total <= allocated
    assert "did not fit its layout" not in caplog.text


def test_a_call_timed_with_the_host_ahead_measures_kernels_not_the_hosts_pace():
    """Each phase a chain of tiny kernels, far shorter than the host's time to launch
    them: timed as issued, the host sets the GPU's pace. Timed with the GPU held for
    longer than the host takes (the ``"kernels"`` call), the host is ahead (checked by
    the recorder) and the phase takes the kernels' own time, well under the paced one."""
    from offload_compiler.planning.replan import paced_phases
    from offload_compiler.replanning import HOLD_EXTRA_MS, HOLD_FACTOR

    x = torch.randn(64, device="cuda")

    def chain():
        y = x
        for _ in range(300):
            y = y * 1.0001 + 0.5  # two kernels of a few microseconds each
        return y

    def timed(what, hold_ms=(0.0, 0.0)):
        rec = measure.CudaSource().recorder(torch.device("cuda", 0), 1, what, hold_ms=hold_ms)
        for phase in measure.PHASES:
            if phase.endswith("_end"):
                chain()
            rec.probe(phase)
        return rec, rec.result()

    for _ in range(3):
        timed("time")  # warm
    # The premise, a host that paces both phases, holds unless other processes' work
    # slows this GPU (the suite's workers share it): timed again, up to five times.
    for _ in range(5):
        _, paced = timed("time")
        print("paced", paced.fw_ms, paced.host_fw_ms, paced.bw_ms, paced.host_bw_ms)
        if paced_phases(paced) == (True, True):
            break
    assert paced_phases(paced) == (True, True)
    hold = tuple(HOLD_FACTOR * h + HOLD_EXTRA_MS for h in (paced.host_fw_ms, paced.host_bw_ms))
    rec, ahead = timed("kernels", hold)
    print("ahead", ahead.fw_ms, ahead.bw_ms, rec.ahead, ahead.ahead_compute_ms)
    assert rec.ahead == [True, True]
    assert ahead.ahead_compute_ms == (ahead.fw_ms, ahead.bw_ms)
    assert ahead.fw_ms < 0.6 * paced.fw_ms and ahead.bw_ms < 0.6 * paced.bw_ms
    # A hold far shorter than the host's time: the GPU reaches the phase first, and says so.
    rec, short = timed("kernels", (0.01, 0.01))
    assert rec.ahead == [False, False] and short.ahead_compute_ms == (None, None)


def test_a_timed_call_measures_the_gpu_work_queued_ahead_of_each_phase():
    """The GPU busy with about 20 ms of earlier work when the forward starts (a loop that
    does not wait for it), and idle when the backward starts (the test waits): the
    recorder reads the forward's head start from an idle stream's event (what the
    earlier work took, timed on the compute stream: other processes may share the GPU),
    and none for the backward. A copy stream busy too does not delay the idle event.
    Within a tenth of the earlier work's time, in one of three measured calls: where the
    suite's other processes share the GPU, their contexts take it in turns, and the idle
    stream's event ran up to a turn late (18.88 ms read against 19.90 ms, session 40;
    14.40 against 17.27 ms, session 45; both ``-n 6``). A recorder that reads the wrong
    events misses in all three."""
    x = torch.randn(1 << 20, device="cuda")
    copy_stream = torch.cuda.Stream()
    cycles = int(20 * measure._cycles_per_ms(torch.device("cuda", 0)))
    readings = []
    for attempt in range(4):  # the first warms up
        rec = measure.CudaSource().recorder(torch.device("cuda", 0), 1, "time")
        torch.cuda.synchronize()
        earlier = torch.cuda.Event(enable_timing=True)
        earlier.record()
        torch.cuda._sleep(cycles)  # earlier work, on the compute stream
        with torch.cuda.stream(copy_stream):
            torch.cuda._sleep(cycles)
        rec.probe("fw_start")
        x.mul_(1.0)
        rec.probe("fw_end")
        torch.cuda.synchronize()
        rec.probe("bw_start")
        x.mul_(1.0)
        rec.probe("bw_end")
        m = rec.result()
        took = earlier.elapsed_time(rec.events["fw_start"])
        if attempt:
            readings.append((m.queued_ms, took, m.fw_ms))
    print("queued, earlier work, forward:", readings)
    assert all(took > 5.0 and queued[1] < 1.0 and fw < 5.0 for queued, took, fw in readings), readings
    assert any(abs(queued[0] - took) < 0.1 * took for queued, took, _ in readings), readings


def test_the_timed_call_runs_without_the_allocators_history():
    """The memory call records the allocator's history (with Python stacks, which slow
    the host); the timed call after it must run with recording off, or its time measures
    the recording. Each real recorder's phases are watched."""
    seen = []

    class Watching(measure.CudaSource):
        def recorder(self, device, call, what, intervals=0, **held):
            rec = super().recorder(device, call, what, intervals, **held)
            if rec is None:
                return None
            probe = rec.probe

            def watched(phase):
                probe(phase)
                seen.append((what, phase, torch._C._cuda_isHistoryEnabled()))
            rec.probe = watched
            return rec

    model = copy.deepcopy(_model())
    b = backend(memory_budget=0.5)
    compiled = torch.compile(model, backend=b)
    idx, tgt = make_batch(CFG, "cuda")
    measure.set_source(Watching())
    try:
        _act_of_one_step(compiled, model, idx, tgt)  # warm-up
        # memory, each timing, the kernels' call where the host paced a timed one (this
        # small model's is), the step that reads it and any re-plan's own measurement
        b.settle(lambda: _act_of_one_step(compiled, model, idx, tgt))
    finally:
        measure.set_source(None)
    print(seen)
    assert b.settled
    assert b.plans[0].measured is not None and b.plans[0].measured.step_peak_bytes
    assert ("memory", "fw_start", True) in seen and ("memory", "bw_end", False) in seen
    timed = [enabled for what, _, enabled in seen if what != "memory"]
    assert len(timed) >= 4 * TIMED_CALLS and len(timed) % 4 == 0 and not any(timed)


def test_memory_limit_holds_on_the_measured_peak():
    model = copy.deepcopy(_model())
    idx, tgt = make_batch(CFG, "cuda")
    base = torch.compile(model, backend=backend(policy="none"))
    for _ in range(3):
        base_act, base_peak = _act_of_one_step(base, model, idx, tgt)
    torch._dynamo.reset()
    low = torch.compile(model, backend=backend(memory_budget=0.5, replan=False))
    for _ in range(3):
        _, low_peak = _act_of_one_step(low, model, idx, tgt)
    torch._dynamo.reset()
    limit = (base_peak + low_peak) // 2  # between nothing moved and a plan that moves a lot
    b = backend(memory_limit=f"{limit}B")
    compiled = torch.compile(model, backend=b)
    # Each plan: a warm-up step, memory, each timing and one reading it
    # (``replanning.TIMED_CALLS``); up to three re-plans; then three steps.
    peaks = [_act_of_one_step(compiled, model, idx, tgt)[1]]  # settled is vacuous before the first call
    while not b.settled and len(peaks) < SETTLE_STEPS:
        peaks.append(_act_of_one_step(compiled, model, idx, tgt)[1])
    peaks += [_act_of_one_step(compiled, model, idx, tgt)[1] for _ in range(3)]
    print(f"limit {limit / 2**20:.0f} MiB; baseline peak {base_peak / 2**20:.0f} MiB, budget 0.5 "
          f"{low_peak / 2**20:.0f} MiB; peaks "
          f"{[round(p / 2**20) for p in peaks]} MiB;", [p.summary() for p in b.plans])
    assert b.settled
    assert max(peaks[-3:]) <= limit


def test_auto_measures_nothing_moved_first_and_judges_its_replan_against_it(caplog):
    """On a GPU with room, ``"auto"``'s first plan moves nothing (``planning.limits``
    reads the device), the re-plan's overhead is measured against it, timed beside the
    re-plan (its graph run in alternate steps), and gradients over the whole flow (each
    plan measured, the graph compiled again, the steps that ran nothing moved) are bitwise
    those of nothing moved (eager inner compiler)."""
    from offload_compiler.planning.limits import unmoved_fits

    assert unmoved_fits(1 << 20, "cuda:0") and not unmoved_fits(1 << 50, "cuda:0")
    model = _model()
    ref = _steps(model, _eager("none"), 30)
    b = backend(inner_compiler="eager", memory_budget="auto")
    with caplog.at_level(logging.INFO, logger="offload_compiler"):
        got = _steps(model, b, 30)
    first = b.plans[0]
    print([p.summary() for p in b.plans])
    assert first.provisional and not first.offloaded and not first.recomputed and first.measured is not None
    assert len(b.plans) >= 2 and b.plans[1].replaces == first.graph_id  # re-planned by step 30
    if b.plans[1].measured is not None and (b.plans[1].offloaded or b.plans[1].recomputed):
        assert f"with nothing moved, as graph {first.graph_id} measured it beside this plan" in caplog.text
        assert f"graph {first.graph_id} (nothing moved) timed beside it, a step apart" in b.plans[1].note
    assert_bitwise(ref, got)
