"""Dynamic sizes: a graph with symbolic sizes is planned at the sizes it serves.

Dynamo compiles a graph with a dynamic dimension once, at the second distinct size it
sees; before, the plan was made at that size and served every later one (a model fed
rising lengths offloaded nothing at its longest). These tests feed the example GPT
lengths in rising and falling order (CPU loopback) and check what is kept and moved at
the longest, how many plans are made, and that gradients do not change.
"""

import logging

import pytest
import torch
from torch.fx.experimental.symbolic_shapes import ShapeEnv

from offload_compiler.models.gpt import GPT, make_batch, preset
from offload_compiler.planning import sizes
from offload_compiler.planning.sizes import MAX_PLANS, Choice, PlanPerSize, choose_plan
from offload_compiler.runtime import host_pool
from passes.nodes import size_hint, sizes_at, tensor_nbytes
from helpers import assert_bitwise, assert_close, backend, loopback, train
from models import Attention, NormGeluMLP

#: An activation budget in bytes: the tiny GPT at length 64 is under it, at 256 far over.
BUDGET_BYTES = "2MiB"

CFG = preset("tiny", seq_len=256)


def _gpt():
    torch.manual_seed(0)
    return GPT(CFG)


def _options(**overrides):
    return loopback(**{"inner_compiler": "eager", "policy": "cost_model", **overrides})


def _saved_per_length(model, lengths, b):
    """For each length: bytes forward saved for backward on the device, and in host
    buffers (offloaded), read from the saved tensors themselves."""
    compiled = torch.compile(model, backend=b)
    out = {}
    for t in lengths:
        kept, host = 0, 0

        def pack(tensor):
            nonlocal kept, host
            if host_pool().lookup(tensor) is not None:
                host += tensor.nbytes
            else:
                kept += tensor.nbytes
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            loss = compiled(*make_batch(CFG, seq_len=t))
        loss.backward()
        out[t] = (kept, host)
    return out


def _moved_bytes(plan):
    return plan.offloaded_bytes + sum(d.nbytes for d in plan.recomputed)


# --- the rule, on plain dicts -------------------------------------------------------

@pytest.mark.parametrize("planned, seen, largest, expected", [
    # covered: the smallest plan at or above the call
    ([{"s0": 64}, {"s0": 128}], {"s0": 100}, {"s0": 128}, Choice(1)),
    ([{"s0": 64}, {"s0": 128}], {"s0": 32}, {"s0": 128}, Choice(0)),
    ([{"s0": 64}, {"s0": 128}], {"s0": 64}, {"s0": 128}, Choice(0)),
    # above every plan but within 1.5x of the largest: the largest
    ([{"s0": 64}], {"s0": 96}, {"s0": 96}, Choice(0)),
    # far above: a new plan at the largest seen (here more than the call)
    ([{"s0": 64}], {"s0": 97}, {"s0": 97}, Choice(-1, {"s0": 97})),
    ([{"s0": 64, "s1": 8}], {"s0": 100, "s1": 4}, {"s0": 100, "s1": 8},
     Choice(-1, {"s0": 100, "s1": 8})),
    # one symbol far above is enough
    ([{"s0": 64, "s1": 8}], {"s0": 64, "s1": 13}, {"s0": 64, "s1": 13},
     Choice(-1, {"s0": 64, "s1": 13})),
    # the plans are made: the largest serves, capped
    ([{"s0": 64}, {"s0": 128}, {"s0": 256}], {"s0": 512}, {"s0": 512}, Choice(2, capped=True)),
])
def test_choose_plan(planned, seen, largest, expected):
    assert choose_plan(planned, seen, largest, factor=1.5, max_plans=3) == expected


def test_size_hint_evaluates_symbolic_sizes_at_the_sizes_in_force():
    env = ShapeEnv()
    s0 = env.create_symintnode(env.create_symbol(48, sizes_source("a")), hint=48)
    s1 = env.create_symintnode(env.create_symbol(3, sizes_source("b")), hint=3)
    x = torch.empty(1, device="meta")
    assert size_hint(2 * s0 + 1) == 97 and size_hint(s0 * s1) == 144
    with sizes_at({s0.node.expr: 256}):
        assert size_hint(2 * s0 + 1) == 513
        assert size_hint(s0 * s1) == 768          # s1 not given: its hint
        assert size_hint(7) == 7
        assert tensor_nbytes(x) == 4
    assert size_hint(2 * s0 + 1) == 97             # the hint again outside
    inner = object()
    assert sizes.at_sizes(inner, None) is inner    # static graphs: the partitioner as is
    uuids = {sizes.SizedPartitioner(_Uuid(), {s0.node.expr: v}).uuid() for v in (64, 128)}
    assert len(uuids) == 2                         # a cached plan at other sizes is not reused


def sizes_source(name):
    from torch._dynamo.source import ConstantSource

    return ConstantSource(name)


class _Uuid:
    def uuid(self):
        return "offload-x"


def test_dispatch_runs_the_chosen_plan_and_drops_one_that_adds_guards(caplog):
    """The dispatcher on a hand-built size symbol, with a compile that returns which
    sizes it was planned at. A plan whose compile guards on the sizes (which Dynamo's
    guards, built before, would not check) is never run."""
    caplog.set_level(logging.INFO, logger="offload_compiler")
    env = ShapeEnv()
    s0 = env.create_symintnode(env.create_symbol(64, sizes_source("t")), hint=64)
    site = sizes.SizeSite(s0.node.expr, 0, "int", 0, 64, "L['t']", env)
    made = []

    def compile_at(values):
        t = int(values[s0.node.expr])
        made.append(t)
        if t == 256:
            bool(s0 > 10)  # a guard
        return lambda *args: t

    per_size = PlanPerSize([site], compile_at)
    ran = [per_size(t, "other argument") for t in (50, 96, 97, 80, 64, 256, 400, 500)]
    assert made == [64, 97, 256]
    assert ran == [64, 64, 97, 97, 64, 97, 97, 97]
    assert per_size.planned == [{str(s0.node.expr): 64}, {str(s0.node.expr): 97}]
    warnings = [r.message for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2, warnings
    assert "added guards" in warnings[0] and "=256" in warnings[0]
    assert "plans already" in warnings[1] and "=400 (L['t'])" in warnings[1]


# --- the backend ------------------------------------------------------------------

def test_longest_length_is_planned_alike_in_either_order():
    """Rising order: the longest length comes last, to a graph first planned at 64.
    Falling order: it comes first, to a static graph planned at 256. Both must keep and
    move the same at 256.

    The budget is in bytes, as a user with a memory limit gives it: at a fraction of
    the peak, this model's plan takes the same decisions at every length, so a plan
    made at 64 moved the same tensors at 256 even before plans followed the sizes."""
    rising, falling = [32, 64, 128, 256], [256, 128, 64, 32]
    b_up = backend(**_options(memory_budget=BUDGET_BYTES))
    up = _saved_per_length(_gpt(), rising, b_up)
    torch._dynamo.reset()
    b_down = backend(**_options(memory_budget=BUDGET_BYTES))
    down = _saved_per_length(_gpt(), falling, b_down)

    assert up[256] == down[256], (up, down)
    assert up[256][1] > 0, "nothing was offloaded at the longest length"
    at_256_up = [p for p in b_up.plans if 256 in p.planned_sizes.values()]
    assert len(at_256_up) == 1
    assert b_down.plans[0].planned_sizes == {}  # the first graph of falling order is static
    assert _moved_bytes(at_256_up[0]) == _moved_bytes(b_down.plans[0]) > 0


def test_plans_per_graph_are_bounded_and_the_cap_is_said_once(caplog):
    caplog.set_level(logging.INFO, logger="offload_compiler")
    b = backend(**_options(memory_budget=BUDGET_BYTES))
    lengths = [16, 32, 64, 128, 256, 256, 40]
    saved = _saved_per_length(_gpt(), lengths, b)

    assert len(b.plans) == 1 + MAX_PLANS  # the static graph at 16, three plans after
    assert [min(p.planned_sizes.values()) for p in b.plans[1:]] == [32, 64, 128]
    assert "planned for" in b.plans[-1].summary()
    capped = [r for r in caplog.records if r.levelno == logging.WARNING and "plans already" in r.message]
    assert len(capped) == 1, [r.message for r in capped]
    assert "=256" in capped[0].message and "L['" in capped[0].message
    made = [r.message for r in caplog.records if "graph with dynamic sizes planned for" in r.message]
    assert len(made) == MAX_PLANS and "largest seen" in made[-1]
    assert saved[256][1] > 0


def test_gradients_bitwise_across_lengths_and_replans():
    lengths = list(range(32, 257, 32))

    def batch(step):
        return make_batch(CFG, seq_len=lengths[step], seed=step)

    ref = train(_gpt(), batch, backend(**_options(policy="none")), steps=len(lengths))
    b = backend(**_options(memory_budget=BUDGET_BYTES))
    got = train(_gpt(), batch, b, steps=len(lengths))
    assert_bitwise(ref, got)
    # 32 static; 64 planned, 96 within 1.5x; 128 re-planned, up to 192 within; 224 re-planned
    assert len(b.plans) == 4
    assert [p.planned_sizes and min(p.planned_sizes.values()) for p in b.plans] == [{}, 64, 128, 224]
    assert sum(len(p.offloaded) for p in b.plans) > 0


def test_inductor_replans_and_keeps_gradients():
    torch.manual_seed(0)
    model = Attention()
    lengths = [8, 16, 64]

    def batch(step):
        return (torch.randn(2, lengths[step], 32, generator=torch.Generator().manual_seed(step)),)

    options = loopback(policy="cost_model", memory_budget=0.5)
    ref = train(model, batch, backend(**{**options, "policy": "none"}), steps=len(lengths))
    b = backend(**options)
    got = train(model, batch, b, steps=len(lengths))
    assert_close(ref, got, rtol=1e-5, atol=1e-6)
    assert [min(p.planned_sizes.values()) for p in b.plans[1:]] == [16, 64]


def _returned(b, *, model, dynamic, grad=True):
    """What the backend returned for each graph of ``model(x)``."""
    out, x = [], torch.randn(8, 32)  # a fresh input: Dynamo marks the one it saw dynamic

    def spy(gm, example_inputs):
        out.append(b(gm, example_inputs))
        return out[-1]

    compiled = torch.compile(model, backend=spy, dynamic=dynamic)
    with torch.set_grad_enabled(grad):
        compiled(x)
    torch._dynamo.reset()
    return out


def test_a_wrapper_only_where_a_plan_depends_on_sizes():
    torch.manual_seed(0)
    model = NormGeluMLP()
    dynamic = _returned(backend(**_options()), model=model, dynamic=True)
    assert len(dynamic) == 1 and isinstance(dynamic[0], PlanPerSize)
    for b, kw in [(backend(**_options()), dict(dynamic=False)),             # static sizes
                  (backend(**_options(policy="none")), dict(dynamic=True)),  # nothing planned
                  (backend(**_options()), dict(dynamic=True, grad=False))]:  # no backward
        got = _returned(b, model=model, **kw)
        assert got and not any(isinstance(f, PlanPerSize) for f in got), kw
