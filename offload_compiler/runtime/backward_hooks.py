"""Hooks on the backward of one call of a compiled graph (how a measured call knows
that its backward began and ended)."""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch.utils._pytree import tree_leaves


def on_backward(args: tuple, out: Any, done: Callable[[], None],
                started: Callable[[], None] | None = None) -> list | None:
    """Call ``started`` when the backward of the call that took ``args`` and returned
    ``out`` is about to run and ``done`` once it has given its inputs their gradients;
    the hooks' handles, or ``None`` when that call has no backward (nothing in or out
    requires a gradient)."""
    inputs = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    outputs = [o for o in tree_leaves(out) if isinstance(o, torch.Tensor) and o.requires_grad]
    if not inputs or not outputs:
        return None
    handles: list[Any] = []
    begun = []

    def backward_started(_grads: Any) -> None:
        if not begun:  # the graph's backward node is about to run
            begun.append(True)
            if started is not None:
                started()

    def backward_done(_grad: Any) -> None:
        for h in handles:
            h.remove()
        if begun:
            done()

    from torch.autograd.graph import register_multi_grad_hook

    for node in {o.grad_fn for o in outputs if o.grad_fn is not None}:
        handles.append(node.register_prehook(backward_started))
    handles.append(register_multi_grad_hook(inputs, backward_done, mode="any"))
    return handles
