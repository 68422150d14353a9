"""One block at a time (``per_block``): each block of the example GPT compiled on its own,
its first reloads prefetched by the previous block's backward (loopback, CPU).

The order of operations is read from the runtime's recorder (``chain.record``), never
from timing. A marker after each block records when that block's backward starts.
"""

import copy
import dataclasses
import gc
import json
import logging

import pytest
import torch

import offload_compiler
from offload_compiler.decision import OFFLOAD
from offload_compiler.models.gpt import GPT, make_batch, preset
from offload_compiler.planning.simulator import Lanes, SimTensor, simulate
from offload_compiler.runtime import chain, host_pool, measure

from helpers import BOTH_READ, MEASURED, FakeSource, as_predicted

CFG = preset("tiny", n_layers=3)
MB = 1 << 20


class _Mark(torch.autograd.Function):
    """Identity; its backward (which runs right before the marked block's backward)
    appends ``("backward", i)`` to the recorder, or raises if asked."""

    @staticmethod
    def forward(ctx, x, steps, i, fail):
        ctx.steps, ctx.i, ctx.fail = steps, i, fail
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        if ctx.fail:
            raise RuntimeError(f"injected failure before block {ctx.i}'s backward")
        if ctx.steps is not None:
            ctx.steps.append(("backward", ctx.i))
        return grad, None, None, None


class Marked(torch.nn.Module):
    def __init__(self, block, i):
        super().__init__()
        self.block, self.i = block, i
        self.steps, self.fail = None, False

    def forward(self, x):
        return _Mark.apply(self.block(x), self.steps, self.i, self.fail)


def _model(cfg=CFG):
    torch.manual_seed(0)
    return GPT(cfg)


def _per_block(model, **options):
    """A copy of ``model`` with every block compiled on its own (one backend for all, so
    Dynamo reuses one graph) and marked; returns (model, backend)."""
    torch._dynamo.reset()
    model = copy.deepcopy(model)
    backend = offload_compiler.make_backend(
        **{"devices": ("cpu",), "inner_compiler": "eager", "min_offload_bytes": 0, **options})
    for i, block in enumerate(model.blocks):
        block.compile(backend=backend)
        model.blocks[i] = Marked(block, i)
    return model, backend


def _step(model, batches, steps=None):
    """One optimizer step's gradients over ``batches`` (micro-batches accumulated)."""
    for b in model.blocks:
        b.steps = steps
    for idx, tgt in batches:
        model(idx, tgt).backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    return grads


def _assert_bitwise(ref, got):
    for i, (a, b) in enumerate(zip(ref, got)):
        assert torch.equal(a, b), f"gradient {i} differs by {(a - b).abs().max()}"


def _ops(steps, op):
    return [i for i, s in enumerate(steps) if s[0] == op]


def _nothing_left(in_use_before):
    gc.collect()
    assert chain.pending() == chain.Pending(0, 0, 0, 0)
    assert host_pool().stats().in_use_bytes == in_use_before


@pytest.fixture
def in_use_before():
    gc.collect()
    chain.clear()
    return host_pool().stats().in_use_bytes


def test_gradients_bitwise_and_first_reloads_issued_before_their_block_backward(in_use_before):
    model = _model()
    batch = [make_batch(CFG)]
    ref, _ = _per_block(model, policy="none")
    want = [_step(ref, batch) for _ in range(2)]
    got, backend = _per_block(model, policy="all", per_block=True)
    for step in range(2):
        with chain.record() as steps:
            grads = _step(got, batch, steps)
        _assert_bitwise(want[step], grads)
        n = CFG.n_layers
        calls = {s.call for s in steps if s[0] == "push"}
        assert len(calls) == n  # forward calls registered in forward order
        first = min(calls)
        starts = {s[1]: k for k, s in enumerate(steps) if s[0] == "backward"}
        assert list(starts) == list(range(n - 1, -1, -1))  # backwards run last block first
        for i in range(n - 1):
            call = first + i
            prefetch = [k for k in _ops(steps, "prefetch") if steps[k].call == call]
            take = [k for k in _ops(steps, "take") if steps[k].call == call]
            # Block i's first reload was issued while block i + 1's backward ran, before
            # block i's backward started, and block i's backward took it.
            assert prefetch and prefetch[0] < starts[i], (i, steps)
            assert prefetch[0] > starts[i + 1], (i, steps)
            assert take and take[0] > starts[i] and len(take) == len(prefetch)
        # The last block's backward runs first: nothing before it to prefetch its reloads.
        last = first + n - 1
        assert not [k for k in _ops(steps, "prefetch") if steps[k].call == last]
        # The residual's release ends each block's forward: carried, and completed by
        # the next block's first release (the last block's by its backward's first reload).
        carries, settles = _ops(steps, "carry"), _ops(steps, "settle")
        assert len(carries) == len(settles) == n
        assert all(c < s for c, s in zip(carries, settles))
    assert len(backend.plans) == 1  # one graph, called once per block
    _nothing_left(in_use_before)


def test_a_block_alone_runs_and_prefetches_nothing(in_use_before):
    cfg = preset("tiny", n_layers=1)
    model, batch = _model(cfg), [make_batch(cfg)]
    ref, _ = _per_block(model, policy="none")
    got, _ = _per_block(model, policy="all", per_block=True)
    with chain.record() as steps:
        grads = _step(got, batch, steps)
    _assert_bitwise(_step(ref, batch), grads)
    assert _ops(steps, "push") and not _ops(steps, "prefetch") and not _ops(steps, "take")
    _nothing_left(in_use_before)


def test_no_grad_forward_registers_nothing(in_use_before):
    model, (idx, _) = _model(), make_batch(CFG)
    got, _ = _per_block(model, policy="all", per_block=True)
    acquires = host_pool().stats().acquires
    with chain.record() as steps, torch.no_grad():
        got(idx)
    assert not steps and host_pool().stats().acquires == acquires
    _nothing_left(in_use_before)


def test_gradient_accumulation_over_two_micro_batches(in_use_before):
    model = _model()
    batches = [make_batch(CFG, seed=1), make_batch(CFG, seed=2)]
    ref, _ = _per_block(model, policy="none")
    got, _ = _per_block(model, policy="all", per_block=True)
    want = _step(ref, batches)
    with chain.record() as steps:
        grads = _step(got, batches, steps)
    _assert_bitwise(want, grads)
    # Each micro-batch: every block but the last had its first reloads prefetched and taken.
    assert len(_ops(steps, "take")) == len(_ops(steps, "prefetch")) == 2 * (CFG.n_layers - 1)
    assert not _ops(steps, "discard")
    _nothing_left(in_use_before)


def test_forward_twice_then_two_backwards_in_reverse_order(in_use_before):
    """Two micro-batches' forwards, then their backwards, the last forward's first: the
    first micro-batch's last block is prefetched by the second's first block."""
    model = _model()
    batches = [make_batch(CFG, seed=1), make_batch(CFG, seed=2)]
    ref, _ = _per_block(model, policy="none")
    got, _ = _per_block(model, policy="all", per_block=True)
    want = _step(ref, batches)
    with chain.record() as steps:
        losses = [got(idx, tgt) for idx, tgt in batches]
        for loss in reversed(losses):
            loss.backward()
    del losses
    grads = [p.grad.clone() for p in got.parameters()]
    for a, b in zip(want, grads):
        torch.testing.assert_close(a, b)  # summed in another order: not bitwise
    assert len(_ops(steps, "take")) == len(_ops(steps, "prefetch")) == 2 * CFG.n_layers - 1
    _nothing_left(in_use_before)


def test_exception_in_backward_leaves_nothing_held(in_use_before):
    model, batch = _model(), [make_batch(CFG)]
    ref, _ = _per_block(model, policy="none")
    got, _ = _per_block(model, policy="all", per_block=True)
    got.blocks[0].fail = True  # raises right before block 0's backward
    with chain.record() as steps:
        with pytest.raises(RuntimeError, match="injected failure"):
            _step(got, batch, [])
        got.zero_grad(set_to_none=True)
        gc.collect()
        # Block 0's first reload was prefetched by block 1's backward, then never taken.
        assert chain.pending() == chain.Pending(0, 0, 0, 0)
        assert _ops(steps, "prefetch") and _ops(steps, "discard")
    assert host_pool().stats().in_use_bytes == in_use_before
    got.blocks[0].fail = False
    _assert_bitwise(_step(ref, batch), _step(got, batch))
    _nothing_left(in_use_before)


def test_other_input_shapes_are_still_right(in_use_before):
    model = _model()
    batches = [make_batch(CFG, seq_len=n) for n in (64, 32, 48)]
    ref, _ = _per_block(model, policy="none")
    got, _ = _per_block(model, policy="all", per_block=True)
    for batch in batches:
        want = _step(ref, [batch])
        with chain.record() as steps:
            grads = _step(got, [batch], steps)
        _assert_bitwise(want, grads)
        assert not _ops(steps, "discard")
    _nothing_left(in_use_before)


def test_backward_twice_with_retain_graph(in_use_before):
    model, (idx, tgt) = _model(), make_batch(CFG)
    ref, _ = _per_block(model, policy="none")
    got, _ = _per_block(model, policy="all", per_block=True)
    want = _step(ref, [(idx, tgt)])
    loss = got(idx, tgt)
    loss.backward(retain_graph=True)
    first = [p.grad.clone() for p in got.parameters()]
    got.zero_grad(set_to_none=True)
    loss.backward()  # the calls are off the chain: each backward reloads its own
    _assert_bitwise(want, first)
    _assert_bitwise(want, [p.grad for p in got.parameters()])
    del loss
    _nothing_left(in_use_before)


def test_inductor_keeps_the_chain_ops(in_use_before):
    """Under Inductor the ops survive dead-code elimination and keep their order."""
    cfg = preset("tiny", n_layers=2)
    model, batch = _model(cfg), [make_batch(cfg)]
    want = _step(copy.deepcopy(model), batch)  # eager, uncompiled
    got, _ = _per_block(model, policy="all", per_block=True, inner_compiler="inductor")
    with chain.record() as steps:
        grads = _step(got, batch, steps)
    for a, b in zip(want, grads):
        torch.testing.assert_close(a, b)
    assert len(_ops(steps, "take")) == len(_ops(steps, "prefetch")) == cfg.n_layers - 1
    _nothing_left(in_use_before)


def test_planned_prefetch_point_survives_the_plan_cache(in_use_before, caplog):
    """With the cost model, the planner places the next call's prefetch; a plan taken
    from the plan cache places it alike."""
    model, batch = _model(), [make_batch(CFG)]
    ref, _ = _per_block(model, policy="none")
    want = _step(ref, batch)
    placed = []
    for attempt in ("planned", "cached"):
        got, backend = _per_block(model, policy="cost_model", memory_budget="auto", per_block=True)
        with caplog.at_level("INFO", logger="offload_compiler.progress"), chain.record() as steps:
            grads = _step(got, batch, steps)
        _assert_bitwise(want, grads)
        assert len(_ops(steps, "take")) == len(_ops(steps, "prefetch")) == CFG.n_layers - 1, attempt
        (plan,) = backend.plans
        nodes = list(plan.bw_graph.graph.nodes)
        (prefetch,) = [n for n in nodes if n.target is chain.PREFETCH_NEXT]
        placed.append((nodes.index(prefetch), prefetch.args[1].name))
        if attempt == "planned":  # the planner chose the point (not the default: last reload)
            assert plan.simulation.next_call_before is not None
    assert "plan taken from the plan cache" in caplog.text
    assert placed[0] == placed[1]
    _nothing_left(in_use_before)


def test_per_block_option_is_validated():
    with pytest.raises(ValueError, match=r"per_block='yes' is not valid; give True or False"):
        offload_compiler.make_backend(per_block="yes")


@pytest.mark.gpu
def test_per_block_on_a_gpu_with_delayed_copy_streams_bitwise():
    """On a GPU, with each copy stream spinning ~1 ms before every copy and compute
    delayed before backward: a missing wait anywhere in the chain (a prefetched reload
    read early, a carried source freed early) becomes a wrong gradient."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from offload_compiler.runtime import streams

    cfg = preset("tiny", vocab_size=4096, seq_len=1024, n_layers=3, d_model=1024, n_heads=8,
                 batch_size=8, dropout=0.1)
    torch.manual_seed(0)
    model = GPT(cfg).cuda().to(torch.bfloat16)
    batch = [make_batch(cfg, "cuda")]

    def run(**options):
        got, _ = _per_block(model, **{"devices": ("cuda",), "min_offload_bytes": 1 << 20, **options})
        out = []
        with sdpa_kernel(SDPBackend.MATH), chain.record() as steps:
            for step in range(3):
                torch.manual_seed(step)
                for b in got.blocks:
                    b.steps = steps
                idx, tgt = batch[0]
                loss = got(idx, tgt)
                torch.cuda._sleep(5_000_000)
                loss.backward()
                out.append([p.grad.clone() for p in got.parameters()])
                got.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        return out, steps

    want, _ = run(policy="none")
    streams.set_copy_delay(d2h=2_000_000, h2d=2_000_000)
    try:
        grads, steps = run(policy="all", per_block=True)
    finally:
        streams.set_copy_delay()
    for a, b in zip(want, grads):
        _assert_bitwise(a, b)
    assert len(_ops(steps, "take")) == len(_ops(steps, "prefetch")) == 3 * (cfg.n_layers - 1)
    assert len(_ops(steps, "settle")) == len(_ops(steps, "carry"))
    gc.collect()
    assert chain.pending() == chain.Pending(0, 0, 0, 0)


# -- the planner's model of a chain (simulator, on hand-built steps) ----------------

LANES = Lanes(d2h_gbps=10.0, h2d_gbps=10.0)  # 10 MB: 1.05 ms a copy
CHAINED = dataclasses.replace(LANES, chained=True)


def T(name, nbytes, produced, last_fw, first_bw, last_bw):
    return SimTensor(name, nbytes, produced, last_fw, first_bw, last_bw, OFFLOAD)


def test_chained_first_reload_lands_during_the_previous_backward():
    # A is read by the first backward op: alone, backward waits for its whole copy.
    ts = [T("A", 10 * MB, 0, 0, 0, 0)]
    alone = simulate([5, 5], [1, 5, 5], ts, LANES)
    chained = simulate([5, 5], [1, 5, 5], ts, CHAINED)
    assert alone.stall_ms == pytest.approx(10 * MB / 1e10 * 1e3)
    assert chained.stall_ms == 0 and chained.prefetched == ("A",)
    # The next call's A is issued where it still ends, with the lead, before the end of
    # backward, and held from there: the call's own peak counts both calls' A.
    assert chained.next_call_before == 2
    assert chained.prefetch_lead_ms == pytest.approx(5)
    assert chained.call_peak_bytes == 2 * 10 * MB > alone.peak_bytes
    # What a call of a chain holds while the others run: nothing of A.
    assert chained.peak_bytes == 0 and alone.peak_bytes == 10 * MB


def test_chained_prefetch_waits_for_the_calls_own_reloads():
    # B is reloaded late in backward, on the same copy engine: the next call's A goes after it.
    ts = [T("A", 10 * MB, 0, 0, 0, 0), T("B", 30 * MB, 0, 0, 2, 2)]
    r = simulate([5, 5], [1, 5, 5], ts, CHAINED)
    assert r.next_call_before >= r.reload_before["B"]


def test_chained_release_at_the_end_of_forward_is_carried():
    # B is produced by the last forward op: alone, forward waits for its copy.
    ts = [T("B", 10 * MB, 1, 1, 1, 1)]
    alone = simulate([5, 1], [5, 5], ts, LANES)
    chained = simulate([5, 1], [5, 5], ts, CHAINED)
    assert alone.stall_ms > 0 and alone.fw_ms > 6
    assert chained.stall_ms == 0 and chained.fw_ms == pytest.approx(6)
    assert chained.carried_bytes == 10 * MB
    # Its copy runs into the next call's forward (the copy engine is shared by the calls).
    assert chained.d2h_spill_ms == pytest.approx(10 * MB / 1e10 * 1e3)


def test_chained_copies_beyond_a_forward_per_call_cost_their_excess():
    # 30 MB to copy out (3.1 ms) per call of a 2 ms forward: the copy engine falls
    # 1.1 ms further behind with every call, which some call waits for.
    ts = [T("B", 30 * MB, 0, 0, 1, 1)]
    r = simulate([1, 1], [5, 5], ts, CHAINED)
    assert r.stall_ms == pytest.approx(30 * MB / 1e10 * 1e3 - 2)
    assert r.step_ms == pytest.approx(12 + r.stall_ms)
    fits = simulate([1, 1], [5, 5], [T("B", 10 * MB, 0, 0, 1, 1)], CHAINED)
    assert fits.stall_ms == 0


def test_chained_budget_bounds_what_a_call_holds_between_forward_and_backward():
    from offload_compiler.planning.solver import Option, solve

    # C is read by the first backward op: moving it empties the time between forward and
    # backward (when, in a chain, the other calls run), not the start of backward.
    ts = [SimTensor("A", 10 * MB, 0, 0, 1, 1), SimTensor("C", 40 * MB, 1, 1, 0, 0)]
    options = {n: Option(can_offload=True, can_recompute=False) for n in ("A", "C")}
    chained = solve([5, 5], [5, 5], ts, options, CHAINED, budget_bytes=10 * MB, max_overhead=0.03)
    assert chained.met and chained.result.peak_bytes <= 10 * MB
    assert chained.decisions["C"] == OFFLOAD and chained.result.call_peak_bytes >= 40 * MB
    alone = solve([5, 5], [5, 5], ts, options, LANES, budget_bytes=10 * MB, max_overhead=0.03)
    assert not alone.met and alone.result.peak_bytes >= 40 * MB


# -- the comparison harness: per-block compile, DDP and FSDP2 (gloo, two processes) ----

def test_compare_compiles_each_block_on_its_own():
    from offload_compiler.compare.run import Row, setup_strategy

    spec = dict(strategy="offload:0.5", preset="tiny", model=None, device="cpu", dtype="float32",
                blocks=None, compile="per-block")
    model, compiled, *_ = setup_strategy(spec, Row("offload:0.5"))
    assert compiled is model and not isinstance(model, torch._dynamo.eval_frame.OptimizedModule)
    assert all(isinstance(b, torch._dynamo.eval_frame.OptimizedModule) for b in model.blocks)
    assert compiled._offload_backend.config.per_block


@pytest.mark.parametrize("strategy, note", [("offload:12MiB", "12MiB bounds what each block's call holds"),
                                            ("offload:0.5", ""), ("offload:auto", "")])
def test_a_per_block_row_with_a_byte_budget_says_it_bounds_each_call(strategy, note):
    from offload_compiler.compare.run import Row, setup_strategy

    spec = dict(strategy=strategy, preset="tiny", model=None, device="cpu", dtype="float32",
                blocks=None, compile="per-block")
    row = Row(strategy)
    setup_strategy(spec, row)
    assert row.note.startswith(note) and bool(row.note) == bool(note)


def test_compare_per_block_rows_agree(tmp_path):
    from offload_compiler import compare

    rows = compare.compare(preset="tiny", device="cpu", steps=1, warmup=0, budgets=(0.5,),
                           strategies=["eager", "inductor", "sac", "offload:0.5"],
                           compile_mode="per-block", out=tmp_path, caches="warm")
    assert [(r.status, r.agrees) for r in rows] == [("ok", "yes")] * 4, [r.note for r in rows]


def test_compare_refuses_unknown_parallel_settings():
    from offload_compiler import compare

    with pytest.raises(ValueError, match=r"compile_mode='blockwise' is not valid; choose one of \('whole', 'per-block'\)"):
        compare.compare(compile_mode="blockwise")
    with pytest.raises(ValueError, match=r"distributed='zero' is not valid; choose None or one of \('ddp', 'fsdp2'\)"):
        compare.compare(distributed="zero")
    with pytest.raises(ValueError, match="nproc=0 is not valid"):
        compare.compare(distributed="ddp", nproc=0)


@pytest.mark.parametrize("distributed, compile_mode", [("ddp", "whole"), ("fsdp2", "per-block")])
def test_compare_distributed_on_two_cpu_processes(tmp_path, distributed, compile_mode):
    from offload_compiler import compare

    rows = compare.compare(preset="tiny", device="cpu", steps=1, warmup=0,
                           strategies=["eager", "offload:0.5"], offload_options={"inner_compiler": "eager"},
                           compile_mode=compile_mode, distributed=distributed, nproc=2, out=tmp_path,
                           timeout_s=600)
    assert [(r.status, r.agrees) for r in rows] == [("ok", "yes")] * 2, [r.note for r in rows]
    assert all(r.extra["ranks"] == 2 for r in rows)
    meta = json.loads((tmp_path / "compare.json").read_text())["meta"]
    assert (meta["distributed"], meta["nproc"], meta["compile"]) == (distributed, 2, compile_mode)


class _Probes:
    """A measurement source that writes each probe into ``order`` (no measurement)."""

    def __init__(self, order):
        self.order = order

    def measures(self, device):
        return False  # its recorders measure nothing: plans are searched at once

    def recorder(self, device, call, what, intervals=0, **held):
        order = self.order

        class Recorder:
            phases = []

            def probe(self, phase):
                self.phases = [*self.phases, phase]
                order.append(("probe", call, what, phase))

            def complete(self):
                return self.phases == list(measure.PHASES)

            def abort(self):
                pass

            def result(self):
                return None

        return Recorder()


def test_a_block_graph_is_measured_at_its_middle_call_memory_and_time_a_step_apart(in_use_before):
    """The block graph runs once per block: every call of the first step pins host
    memory before any backward ends. Memory is measured at the middle call of the second
    step (block 1 of 3: neighbours on both sides, as the chain's plan assumes), time at
    the same call of the third, so the allocator's recording is off while it runs; each
    probe inside its own block's backward."""
    order = []
    previous = measure.set_source(_Probes(order))
    try:
        model, _ = _per_block(_model(), memory_budget=0.5, per_block=True)
        batch = make_batch(CFG)
        for _ in range(3):
            _step(model, [batch], order)
            order.append(("step end",))
    finally:
        measure.set_source(previous)
    ends = [i for i, s in enumerate(order) if s == ("step end",)]
    probes = {(s[1], s[2], s[3]): i for i, s in enumerate(order) if s[0] == "probe"}
    n = CFG.n_layers
    assert sorted({(call, what) for call, what, _ in probes}) == [(n + 2, "memory"), (2 * n + 2, "time")]
    assert probes[n + 2, "memory", "bw_end"] < probes[2 * n + 2, "time", "fw_start"]
    for call, what, step in ((n + 2, "memory", 1), (2 * n + 2, "time", 2)):
        assert all(ends[step - 1] < probes[call, what, p] < ends[step] for p in measure.PHASES)
        starts = order.index(("backward", 1), ends[step - 1])  # right before block 1's backward
        assert starts < probes[call, what, "bw_start"] < probes[call, what, "bw_end"]
        assert probes[call, what, "bw_end"] < order.index(("backward", 0), ends[step - 1])
    _nothing_left(in_use_before)


def test_a_block_graph_is_planned_again_from_its_measurement_at_a_step_boundary(in_use_before, caplog):
    """Compute measured at twice the estimate: the block graph is planned again once,
    from the measurement; the new plan takes over at the first call of a step (its
    warm-up counts a whole step's calls, so it is measured at the middle call again),
    and the gradients stay bitwise equal to the model without offloading throughout
    (``BOTH_READ`` steps: warm-up, memory, each timing and the step that reads it; the
    same for the re-plan; the call that reads the new plan's measurement)."""
    model, batch = _model(), [make_batch(CFG)]
    ref, _ = _per_block(model, policy="none")
    want = [_step(ref, batch) for _ in range(BOTH_READ)]
    got, backend = _per_block(model, memory_budget=0.5, per_block=True)
    fake = FakeSource(as_predicted(backend.plans, time_scale=2.0))
    previous = measure.set_source(fake)
    try:
        with caplog.at_level(logging.INFO, logger="offload_compiler"):
            for step in range(BOTH_READ):
                _assert_bitwise(want[step], _step(got, batch))
    finally:
        measure.set_source(previous)
    n = CFG.n_layers
    # each call of a step measured at its middle block's call: step k's is call (k - 1) * n + 2
    assert fake.asked == [((step - 1) * n + 2, what) for step, what in MEASURED] * 2
    first, second = backend.plans
    assert second.replaces == first.graph_id and second.measured is not None
    assert second.corrections["fw_scale"] == pytest.approx(2.0, rel=0.05)
    assert "planning again from the measurement" in caplog.text
    _nothing_left(in_use_before)
