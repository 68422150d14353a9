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
