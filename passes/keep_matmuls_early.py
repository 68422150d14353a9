"""Keep matmuls early: stop Inductor from moving a matmul to a later add, where it
would hold the matmul's inputs until then.

Inductor rewrites ``add(mm(a, b), c)`` into ``addmm(c, a, b)`` at the add
(``torch/_inductor/fx_passes/post_grad.py``; on a GPU, not when only pointwise ops read
the sum). The matmul then runs where the add is, and ``a`` and ``b`` stay in memory
until then. With tied embedding and output weights, backward adds the output layer's
weight gradient to the embedding's at its very end: the logits' gradient (1 GiB for
the ``h100`` example) was held through all of backward, and at tight budgets the
step's peak came late in backward with it (an H100's allocator trace,
``benchmarks/memory_peak.py``; ``benchmarks/RESULTS.md``, session 7).

Where the inputs that only the matmul still reads outweigh its result, this pass
reads the result through ``mul(mm, 1)``: the pattern no longer matches, the matmul runs
at its own position, and the product by one is exact and fused into the add's
kernel. Only the matmul's result is held until the add.
"""

from __future__ import annotations

import torch
import torch.fx as fx

from .nodes import alias_closure, dtype_of, is_extern, tensor_nbytes

aten = torch.ops.aten


def addmm_target(node: fx.Node) -> fx.Node | None:
    """The add Inductor fuses matmul ``node`` into as an ``addmm``, if any: the
    matmul's only reader, adding one tensor of the matmul's dtype (the first matmul,
    when both are); on a GPU, not when only fusible ops read the sum."""
    if node.target is not aten.mm.default or len(node.users) != 1:
        return None
    (add,) = node.users
    if add.target is not aten.add.Tensor or add.kwargs.get("alpha", 1) != 1:
        return None
    first = add.args[0]
    if first is not node and getattr(first, "target", None) is node.target and len(first.users) == 1:
        return None  # add(mm, mm): the pattern takes the first
    others = [a for a in add.args if a is not node]
    dtype = dtype_of(node)
    if (len(others) != 1 or not isinstance(others[0], fx.Node) or dtype_of(others[0]) != dtype
            or any(dtype_of(a) != dtype for a in node.all_input_nodes)):
        return None
    device = getattr(node.meta.get("val"), "device", None)
    if device is not None and device.type != "cpu" and add.users and all(
            u.op == "call_function" and not is_extern(u) for u in add.users):
        return None
    return add


def _held_for(mm: fx.Node, add: fx.Node, pos: dict[fx.Node, int]) -> int:
    """Bytes of ``mm``'s inputs that nothing else reads at or after ``add``: what
    deferring ``mm`` to ``add`` keeps in memory longer."""
    held = 0
    for arg in mm.all_input_nodes:
        closure = alias_closure(arg)
        readers = [u for n in closure for u in n.users if u is not mm and u not in closure]
        if all(pos.get(u, len(pos)) < pos[add] for u in readers):
            val = closure[0].meta.get("val")
            held += (tensor_nbytes(val) or 0) if isinstance(val, torch.Tensor) else 0
    return held


def keep_matmuls_early(gm: fx.GraphModule) -> int:
    """Rewrite, in place, every matmul of ``gm`` that Inductor would defer to its add
    while holding more input bytes than it writes; returns how many."""
    nodes = list(gm.graph.nodes)
    pos = {n: i for i, n in enumerate(nodes)}
    count = 0
    for mm in nodes:
        add = addmm_target(mm)
        if add is None:
            continue
        out = tensor_nbytes(mm.meta["val"]) or 0
        if _held_for(mm, add, pos) <= out:
            continue
        with gm.graph.inserting_after(mm):
            keep = gm.graph.call_function(aten.mul.Tensor, (mm, 1))
        keep.meta.update({k: v for k, v in mm.meta.items() if k != "val"})
        keep.meta["val"] = aten.mul.Tensor(mm.meta["val"], 1)  # the fake tensor's own op
        add.replace_input_with(mm, keep)
        count += 1
    if count:
        gm.recompile()
    return count
