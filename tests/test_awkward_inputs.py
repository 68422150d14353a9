"""Awkward inputs a new user tries: each case ran wrong or crashed once (issue 20)."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

from helpers import assert_bitwise, backend, train


class _NormNet(nn.Module):
    """BatchNorm between two linears, optionally under the user's own checkpoint."""

    def __init__(self, user_checkpoint: bool) -> None:
        super().__init__()
        self.l1, self.bn, self.l2 = nn.Linear(32, 16), nn.BatchNorm1d(16), nn.Linear(16, 8)
        self.user_checkpoint = user_checkpoint

    def body(self, x):
        return self.l2(torch.relu(self.bn(self.l1(x))))

    def forward(self, x):
        return checkpoint(self.body, x, use_reentrant=False) if self.user_checkpoint else self.body(x)


@pytest.mark.parametrize("user_checkpoint,options", [
    (False, {"memory_budget": 0.5}),
    (False, {"memory_budget": 0.1}),
    (True, {"policy": "none"}),
    (True, {"memory_budget": 0.5}),
])
def test_batchnorm_with_the_eager_inner_compiler_matches_aot_eager(user_checkpoint, options):
    """The running statistics are a buffer the step writes in place; the eager inner
    compiler once saved it for backward and backward then raised "modified by an
    inplace operation". Gradients and running statistics now equal aot_eager's,
    bitwise, over two steps."""
    torch.manual_seed(0)
    model, ref = _NormNet(user_checkpoint), _NormNet(user_checkpoint)
    ref.load_state_dict(model.state_dict())
    x = torch.randn(64, 32)
    ours = torch.compile(model, backend="offload", options={
        "devices": ("cpu",), "inner_compiler": "eager", "min_offload_bytes": 0, **options})
    theirs = torch.compile(ref, backend="aot_eager")
    for _ in range(2):
        ours(x).sum().backward()
        theirs(x).sum().backward()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        assert torch.equal(p.grad, q.grad), name
    for (name, b), c in zip(model.bn.named_buffers(), ref.bn.buffers()):
        assert torch.equal(b, c), name


class _CheckpointedDropout(nn.Module):
    """Token and position embeddings (the positions an input, as Hugging Face models
    take them), then two blocks with dropout, each under the user's own checkpoint."""

    def __init__(self, d: int = 32, vocab: int = 64, length: int = 16) -> None:
        super().__init__()
        self.emb, self.pos = nn.Embedding(vocab, d), nn.Embedding(length, d)
        self.blocks = nn.ModuleList(nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.GELU(),
                                                  nn.Linear(4 * d, d), nn.Dropout(0.2)) for _ in range(2))
        self.head = nn.Linear(d, vocab)
        self.length = length

    def forward(self, ids, positions):
        x = self.emb(ids) + self.pos(positions.view(-1, self.length))
        for block in self.blocks:
            x = x + checkpoint(block, x, use_reentrant=False)
        return nn.functional.cross_entropy(self.head(x).flatten(0, 1), ids.flatten())


def _checkpointed_dropout_inputs():
    ids = torch.randint(64, (4, 16), generator=torch.Generator().manual_seed(1))
    return ids, torch.arange(16).expand(4, 16).contiguous()


@pytest.mark.parametrize("budget", ["auto", 0.5, 0.1])
def test_dropout_under_the_users_checkpoint_keeps_gradients_bitwise(budget):
    """On the CPU min-cut saves the generator's state for a random op it recomputes under
    a checkpoint, and backward receives it under another name. A plan that recomputed
    the saved view of the positions (received from the graph input) once paired the
    saved tensors off by one place and crashed in backward (a Hugging Face GPT-2 with
    ``gradient_checkpointing_enable()``). Loss and gradients equal those of the same
    compile with nothing moved, bitwise."""
    def run(**options):
        torch._dynamo.reset()
        torch.manual_seed(0)
        model = _CheckpointedDropout()
        compiled = torch.compile(model, backend="offload", options={
            "devices": ("cpu",), "inner_compiler": "eager", "min_offload_bytes": 0, "replan": False,
            "plan_cache": False, **options})
        torch.manual_seed(5)
        loss = compiled(*_checkpointed_dropout_inputs())
        loss.backward()
        return [loss] + [p.grad for p in model.parameters()]

    ref, got = run(policy="none"), run(memory_budget=budget)
    assert len(ref) == len(got) and all(torch.equal(a, b) for a, b in zip(ref, got))


def test_each_saved_value_is_named_as_the_placeholder_that_receives_it():
    """``passes.name_saved_values`` on min-cut's partition of the model above: the saved
    generator states (backward's ``rng_state_output_N``) are renamed, and every saved
    value then has the name of the backward placeholder in its place."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.aot_autograd import make_boxed_compiler
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    from passes import name_saved_values

    seen = {}

    def partition(joint, joint_inputs, *, num_fwd_outputs, **kwargs):
        fw, bw = min_cut_rematerialization_partition(joint, joint_inputs, num_fwd_outputs=num_fwd_outputs, **kwargs)
        before = {p.name for p in bw.graph.find_nodes(op="placeholder")}
        seen.update(renamed=name_saved_values(joint, fw, bw, num_fwd_outputs), fw=fw, bw=bw, n=num_fwd_outputs,
                    before=before)
        return fw, bw

    torch._dynamo.reset()
    torch.manual_seed(0)
    identity = make_boxed_compiler(lambda gm, _: gm)
    compiled = torch.compile(_CheckpointedDropout(), backend=aot_autograd(
        fw_compiler=identity, bw_compiler=identity, partition_fn=partition))
    compiled(*_checkpointed_dropout_inputs()).backward()
    (out,) = seen["fw"].graph.find_nodes(op="output")
    saved = [a.name for a in out.args[0][seen["n"]:]]
    received = [p.name for p in seen["bw"].graph.find_nodes(op="placeholder") if not p.name.startswith("tangents")]
    assert seen["renamed"] == 2 and sum(name.startswith("rng_state_output") for name in seen["before"]) == 2
    assert sorted(saved) == sorted(received) and len(set(saved)) == len(saved)


class _AmpBottlenecks(nn.Module):
    """A vision backbone as torchvision writes one, under bfloat16 autocast on a
    channels-last input: bottlenecks with in-place ReLU and ``out += x``; with
    ``frozen``, a stem whose parameters do not train and batch norms held in eval mode
    through ``train()`` (fine-tuning a detector's backbone)."""

    def __init__(self, frozen: bool, c: int = 16) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU(inplace=True))
        self.convs = nn.ModuleList(nn.ModuleList([nn.Conv2d(c, c // 2, 1, bias=False), nn.BatchNorm2d(c // 2),
                                                  nn.Conv2d(c // 2, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)])
                                   for _ in range(2))
        self.relu, self.head, self.frozen = nn.ReLU(inplace=True), nn.Linear(c, 10), frozen
        for p in self.stem.parameters() if frozen else ():
            p.requires_grad_(False)

    def train(self, mode: bool = True):
        super().train(mode)
        for m in self.modules() if self.frozen else ():
            if isinstance(m, nn.BatchNorm2d):
                m.eval()
        return self

    def forward(self, x, labels):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            x = self.stem(x)
            for conv1, bn1, conv2, bn2 in self.convs:
                out = self.relu(bn1(conv1(x)))
                out = bn2(conv2(out))
                out += x
                x = self.relu(out)
            logits = self.head(x.mean((2, 3)))
        return nn.functional.cross_entropy(logits.float(), labels)


def _amp_inputs(step):
    g = torch.Generator().manual_seed(10 + step)
    x = torch.randn(4, 3, 16, 16, generator=g).contiguous(memory_format=torch.channels_last)
    return x, torch.randint(10, (4,), generator=g)


@pytest.mark.parametrize("frozen", [False, True])
@pytest.mark.parametrize("budget", ["auto", 0.1])
def test_a_vision_backbone_under_autocast_keeps_gradients_and_statistics_bitwise(frozen, budget):
    """In-place ReLU and ``+=`` on a channels-last input under bfloat16 autocast, and a
    frozen stem with batch norms in eval mode: two SGD steps with the eager inner compiler
    give the gradients, weights and running statistics of the same compile with nothing
    moved, bitwise (``benchmarks/RESULTS.md``, session 48's vision probe)."""
    torch.manual_seed(0)
    model = _AmpBottlenecks(frozen).train()
    options = {"devices": ("cpu",), "inner_compiler": "eager", "min_offload_bytes": 0, "plan_cache": False}
    ref_model, got_model = [], []
    ref = train(model, _amp_inputs, backend(policy="none", **options), steps=2, lr=0.1, trained=ref_model)
    planned = backend(memory_budget=budget, **options)
    got = train(model, _amp_inputs, planned, steps=2, lr=0.1, trained=got_model)
    moved = sum(len(p.offloaded) + len(p.recomputed) for p in planned.plans)
    assert moved > 0, "the plan moved nothing: the test would compare nothing moved with itself"
    assert len(got[1][0]) == (14 if frozen else 17)  # the frozen stem: no gradients
    assert_bitwise(got, ref)
    state, ref_state = got_model[0].state_dict(), ref_model[0].state_dict()
    assert all(torch.equal(t, ref_state[k]) for k, t in state.items())
