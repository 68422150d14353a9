"""Gradient parity: the backend never changes gradients (CPU loopback runs the real rewrite)."""

import pytest
import torch

from offload_compiler.models.gpt import GPT, make_batch, preset
from helpers import loopback, assert_bitwise, assert_close, backend, train
from models import Attention, Dropout, Embed, NormGeluMLP, Transposed


def _case(name):
    torch.manual_seed(0)
    if name == "mlp":
        return NormGeluMLP(), (torch.randn(8, 32),)
    if name == "attention":
        return Attention(), (torch.randn(2, 16, 32),)
    if name == "transposed":
        return Transposed(), (torch.randn(16, 32),)
    if name == "embed":
        return Embed(), (torch.randint(50, (4, 8)),)
    if name == "gpt":
        cfg = preset("tiny", n_layers=2)
        return GPT(cfg), make_batch(cfg)
    raise AssertionError(name)


CASES = ["mlp", "attention", "transposed", "embed", "gpt"]


@pytest.mark.parametrize("name", CASES)
def test_eager_bitwise_over_steps(name):
    model, inputs = _case(name)
    ref = train(model, inputs, backend(**loopback(inner_compiler="eager", policy="none")))
    b = backend(**loopback(inner_compiler="eager", policy="all"))
    got = train(model, inputs, b)
    assert b.plans and sum(len(p.offloaded) for p in b.plans) > 0, "nothing was offloaded"
    assert_bitwise(ref, got)


def test_eager_matches_plain_eager_autograd():
    model, inputs = _case("mlp")
    ref = train(model, inputs, "aot_eager")
    got = train(model, inputs, backend(**loopback(inner_compiler="eager")))
    assert_close(ref, got, rtol=0, atol=0)


@pytest.mark.parametrize("name", ["attention", "gpt"])
def test_inductor_within_tolerance(name):
    model, inputs = _case(name)
    ref = train(model, inputs, backend(**loopback(inner_compiler="inductor", policy="none")))
    b = backend(**loopback(inner_compiler="inductor", policy="all"))
    got = train(model, inputs, b)
    assert sum(len(p.offloaded) for p in b.plans) > 0
    assert_close(ref, got, rtol=1e-5, atol=1e-6)


def test_inductor_policy_none_is_plain_inductor():
    model, inputs = _case("mlp")
    ref = train(model, inputs, "inductor")
    got = train(model, inputs, backend(**loopback(policy="none")))
    assert_bitwise(ref, got)


def test_dropout_same_seed_same_gradients():
    torch.manual_seed(0)
    model, x = Dropout(), torch.randn(16, 32)
    ref = train(model, (x,), backend(**loopback(inner_compiler="eager", policy="none")))
    got = train(model, (x,), backend(**loopback(inner_compiler="eager", policy="all")))
    assert_bitwise(ref, got)


def test_gradient_accumulation_and_no_grad_eval_between_steps():
    model, (x,) = _case("mlp")
    results = []
    for policy in ("none", "all"):
        torch._dynamo.reset()
        m = __import__("copy").deepcopy(model)
        c = torch.compile(m, backend=backend(**loopback(inner_compiler="eager", policy=policy)))
        for micro in range(3):
            c(x * (micro + 1)).backward()
            with torch.no_grad():
                c(x)
        results.append([p.grad.clone() for p in m.parameters()])
    for a, b in zip(*results):
        assert torch.equal(a, b)
