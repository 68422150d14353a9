"""Awkward inputs a new user tries: each case ran wrong or crashed once (issue 20)."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint


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
