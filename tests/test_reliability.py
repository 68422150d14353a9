"""Awkward inputs and autograd semantics (CPU loopback)."""

import logging

import pytest
import torch
import torch.nn as nn

from helpers import loopback, assert_bitwise, backend, train
from models import Dropout, NormGeluMLP
from offload_compiler.runtime import host_pool


def test_cpu_model_with_default_options_passes_through_with_one_line(caplog):
    model, x = NormGeluMLP(), torch.randn(8, 32)
    with caplog.at_level(logging.INFO, logger="offload_compiler"):
        got = train(model, (x,), backend(inner_compiler="eager"), steps=2)
    ref = train(model, (x,), "aot_eager", steps=2)
    assert_bitwise(ref, got)
    lines = [r.getMessage() for r in caplog.records if r.name == "offload_compiler"
             and r.levelno == logging.INFO]
    assert len(lines) == 1 and "passes through unchanged" in lines[0], lines


class MixedDtypes(nn.Module):
    """Saves integer, bool and complex tensors beside floating ones."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x, idx):
        h = self.fc(x)
        mask = h > 0                                    # bool
        picked = torch.gather(h, 1, idx)                # int64 index saved
        c = torch.view_as_complex(torch.stack([h, h.tanh()], -1).contiguous())
        spectrum = (c * c).abs()                        # complex saved for abs backward
        return (h * mask).sum() + picked.square().sum() + spectrum.sum()


def test_integer_bool_complex_tensors_stay_and_gradients_match():
    torch.manual_seed(0)
    model = MixedDtypes()
    inputs = (torch.randn(4, 16), torch.randint(16, (4, 3)))
    b = backend(**loopback(inner_compiler="eager"))
    got = train(model, inputs, b)
    ref = train(model, inputs, backend(**loopback(inner_compiler="eager", policy="none")))
    assert_bitwise(ref, got)
    reasons = {d.reason for d in b.plans[0].decisions}
    assert any("complex" in r for r in reasons)
    assert any("torch.bool" in r or "torch.int64" in r for r in reasons)
    assert b.plans[0].offloaded


def test_tiny_tensors_stay_with_reason():
    b = backend(inner_compiler="eager", devices=("cpu",))  # default min_offload_bytes: 1 MiB
    train(NormGeluMLP(), (torch.randn(4, 32),), b, steps=1)
    plan = b.plans[0]
    assert not plan.offloaded
    assert any("min_offload_bytes" in d.reason for d in plan.decisions)


def test_tensor_subclass_inputs_work():
    from torch.testing._internal.two_tensor import TwoTensor

    lin = nn.Linear(8, 8)

    def f(x):
        return torch.tanh(lin(x)).sum()

    x = TwoTensor(torch.randn(4, 8), torch.randn(4, 8))
    grads = []
    for bk in ("aot_eager", backend(**loopback(inner_compiler="eager"))):
        torch._dynamo.reset()
        lin.zero_grad()
        torch.compile(f, backend=bk)(x).backward()
        grads.append([p.grad.clone() for p in lin.parameters()])
    for a, b in zip(*grads):
        assert torch.equal(a, b)


def test_double_backward_raises_clearly_as_without_backend():
    def run(bk):
        torch._dynamo.reset()
        model = NormGeluMLP()
        x = torch.randn(4, 32, requires_grad=True)
        loss = torch.compile(model, backend=bk)(x)
        (g,) = torch.autograd.grad(loss, x, create_graph=True)
        g.sum().backward()

    with pytest.raises(RuntimeError) as plain:
        run("aot_eager")
    with pytest.raises(RuntimeError) as ours:
        run(backend(**loopback(inner_compiler="eager")))
    assert "double backward" in str(ours.value) or str(plain.value)[:60] in str(ours.value)


@pytest.mark.parametrize("min_bytes", [0, 4096, 1 << 30])
def test_dropout_same_gradients_at_every_setting(min_bytes):
    torch.manual_seed(0)
    model, x = Dropout(), torch.randn(16, 32)
    ref = train(model, (x,), backend(**loopback(inner_compiler="eager", policy="none")))
    got = train(model, (x,), backend(inner_compiler="eager", devices=("cpu",),
                                     min_offload_bytes=min_bytes))
    assert_bitwise(ref, got)


def test_many_sequence_lengths_bounded_recompiles_and_pool():
    from torch._dynamo.testing import CompileCounterWithBackend

    pool = host_pool()
    model = NormGeluMLP()
    b = backend(**loopback(inner_compiler="eager"))
    cnt = CompileCounterWithBackend(b)
    compiled = torch.compile(model, backend=cnt)
    lengths = list(range(4, 68, 3))

    def step(t):
        x = torch.randn(2, t, 32)
        torch._dynamo.mark_dynamic(x, 1)
        compiled(x).backward()

    pool.clear()
    step(max(lengths))
    one_step_bytes = pool.stats().reserved_bytes  # blocks one step at the longest length needs
    for t in lengths:
        step(t)
    after_first_pass = pool.stats()
    for t in lengths:
        step(t)
    stats = pool.stats()
    assert cnt.frame_count <= 2, f"{cnt.frame_count} compiles"
    assert stats.allocations == after_first_pass.allocations, "pool grew on a repeat pass"
    # Power-of-two size classes: all shorter lengths together need at most about as
    # much again as the longest one.
    assert stats.reserved_bytes <= 4 * one_step_bytes, (stats.reserved_bytes, one_step_bytes)
