"""Insert: turn each offload decision into four transfer nodes.

Forward, for a saved activation ``x``:

- ``x_host = offload.d2h(x)`` right after ``x``'s producer;
- ``offload.release(x, x_host)`` right after the last forward use of ``x`` or of any
  view of it (the scheduling pass may move it);
- the forward returns ``x_host`` in ``x``'s place among the saved values.

Backward, where the placeholder ``x`` now receives the host tensor:

- ``x_dev = offload.h2d(x, None, device)`` and ``offload.wait(x_dev)`` right before the
  first consumer (the scheduling pass moves ``h2d`` earlier to prefetch);
- every consumer reads ``x_dev`` instead of ``x``.

Every new node gets ``meta["val"]`` from the op's fake implementation and a
``meta["offload"]`` :class:`~passes.transfer_meta.TransferMeta`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.fx as fx
from torch.utils.flop_counter import flop_registry

from offload_compiler.runtime import ops

from .analyze_candidates import alias_closure, is_dense
from .transfer_meta import transfer_meta
from .transfer_meta import META_KEY, TransferMeta


@dataclass(frozen=True)
class Offload:
    """One activation to offload, as the planner decided it."""

    name: str
    nbytes: int
    reason: str


def _fake(op, *args):
    """The op's fake result for ``args`` (nodes are replaced by their ``meta["val"]``)."""
    vals = [a.meta["val"] if isinstance(a, fx.Node) else a for a in args]
    fake_mode = next(v.fake_mode for v in vals if isinstance(v, torch.Tensor))
    with fake_mode:
        return op(*vals)


def is_tensor_op(node: fx.Node) -> bool:
    """A computed tensor: not an input, not a transfer op (what an anchor may be)."""
    return (node.op == "call_function" and transfer_meta(node) is None
            and node.target not in ops.TRANSFER_OPS
            and isinstance(node.meta.get("val"), torch.Tensor))


def _is_extern(node: fx.Node) -> bool:
    packet = getattr(node.target, "overloadpacket", None)
    return packet is not None and packet in flop_registry


def anchor_before(node: fx.Node, floor: fx.Node | None = None) -> fx.Node | None:
    """The tensor a ``release`` placed after ``node`` takes as its anchor.

    Preferably the nearest extern kernel's result (a matmul: materialized anyway, so
    the anchor changes no fusion) at or before ``node`` and not before ``floor``;
    otherwise the nearest computed tensor, looking past ``floor`` if there is none
    between (``None`` only when no tensor is computed before ``node`` at all: the op
    then belongs at the top of the graph).
    """
    nearest = None
    past_floor = False
    cur = node
    while cur is not None and cur.op != "root":
        if is_tensor_op(cur):
            if _is_extern(cur) and not past_floor:
                return cur
            nearest = nearest or cur
            if past_floor:
                return nearest
        if cur is floor:
            if nearest is not None:
                return nearest
            past_floor = True
        cur = cur.prev
    return nearest


def insert_transfers(
    fw_gm: fx.GraphModule,
    bw_gm: fx.GraphModule,
    num_fwd_outputs: int,
    offloads: list[Offload],
) -> None:
    """Rewrite ``fw_gm`` and ``bw_gm`` in place; ``graph.lint()`` holds afterwards."""
    if not offloads:
        return
    fw, bw = fw_gm.graph, bw_gm.graph
    fw_nodes = {n.name: n for n in fw.nodes}
    bw_inputs = {p.name: p for p in bw.find_nodes(op="placeholder")}
    (fw_out,) = fw.find_nodes(op="output")
    new_outputs = list(fw_out.args[0])

    for tid, off in enumerate(offloads):
        x = fw_nodes[off.name]
        placeholder = bw_inputs[off.name]
        dev_val = x.meta["val"]
        # -- forward: copy out after the producer, release after the last use ------
        with fw.inserting_after(x):
            dense = is_dense(dev_val)
            host = fw.call_function(ops.D2H, (x, dense))
        host.meta["val"] = _fake(ops.D2H, *host.args)
        order = {n: i for i, n in enumerate(fw.nodes)}
        users = [u for n in alias_closure(x) for u in n.users if u.op != "output"]
        last = max(users + [host], key=order.__getitem__)
        with fw.inserting_after(last):
            release = fw.call_function(ops.RELEASE, (x, host, anchor_before(last, floor=x)))
        release.meta["val"] = None
        index = next(i for i in range(num_fwd_outputs, len(new_outputs)) if new_outputs[i] is x)
        new_outputs[index] = host
        # -- backward: copy in before the first consumer ---------------------------
        placeholder.meta["val"] = host.meta["val"]
        first = next(n for n in bw.nodes if n in placeholder.users)
        with bw.inserting_before(first):
            dev = bw.call_function(
                ops.H2D,
                (placeholder, None, str(dev_val.device), None if dense else list(dev_val.stride())),
            )
            wait = bw.call_function(ops.WAIT, (dev,))
        dev.meta["val"] = _fake(ops.H2D, *dev.args)
        wait.meta["val"] = None
        for user in list(placeholder.users):
            if user is not dev:
                user.replace_input_with(placeholder, dev)
        pairs = ((host, release), (release, host), (dev, wait), (wait, dev))
        for node, partner in pairs:
            node.meta[META_KEY] = TransferMeta(
                kind=str(node.target._opname),  # d2h / release / h2d / wait
                transfer_id=tid,
                value=off.name,
                nbytes=off.nbytes,
                paired=partner.name,
                reason=off.reason,
            )

    fw_out.args = (tuple(new_outputs),) + tuple(fw_out.args[1:])
    for gm in (fw_gm, bw_gm):
        gm.graph.lint()
        gm.recompile()
