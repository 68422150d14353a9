"""Insert: turn each offload decision into four transfer nodes.

Forward, for a saved activation ``x``:

- ``x_host = offload.d2h(x)`` before the first extern kernel (matmul, attention) after
  ``x``'s producer: only fused work lies between, and Inductor writes ``x`` out where
  it would anyway (see :func:`passes.placement.copy_point`);
- ``offload.release(x, x_host, anchor)`` after the last forward use of ``x`` or of any
  view of it, anchored on a tensor already in memory there (the scheduling pass may
  move it);
- the forward returns ``x_host`` in ``x``'s place among the saved values.

Backward, where the placeholder ``x`` now receives the host tensor:

- ``x_dev = offload.h2d(x, None, device)`` and ``offload.wait(x_dev)`` at the kernel
  boundary before the first consumer (the scheduling pass moves ``h2d`` earlier to
  prefetch);
- every consumer reads ``x_dev`` instead of ``x``.

Every new node gets ``meta["val"]`` from the op's fake implementation and a
``meta["offload"]`` :class:`~passes.transfer_meta.TransferMeta`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.fx as fx

from .nodes import alias_closure, is_dense, transfer_op
from .placement import copy_point, release_point, wait_point
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
        # -- forward: copy out after the producer's fused work, release after the last use
        with fw.inserting_before(copy_point(x)):
            dense = is_dense(dev_val)
            host = fw.call_function(transfer_op("d2h"), (x, dense))
        host.meta["val"] = _fake(transfer_op("d2h"), *host.args)
        order = {n: i for i, n in enumerate(fw.nodes)}
        users = [u for n in alias_closure(x) for u in n.users if u.op != "output"]
        last = max(users + [host], key=order.__getitem__)
        after, anchor = release_point(last, floor=x)
        with fw.inserting_after(after):
            release = fw.call_function(transfer_op("release"), (x, host, anchor))
        release.meta["val"] = None
        index = next(i for i in range(num_fwd_outputs, len(new_outputs)) if new_outputs[i] is x)
        new_outputs[index] = host
        # -- backward: copy in at the kernel boundary before the first consumer ------
        placeholder.meta["val"] = host.meta["val"]
        first = next(n for n in bw.nodes if n in placeholder.users)
        with bw.inserting_before(wait_point(first)):
            dev = bw.call_function(
                transfer_op("h2d"),
                (placeholder, None, str(dev_val.device), None if dense else list(dev_val.stride())),
            )
            wait = bw.call_function(transfer_op("wait"), (dev,))
        dev.meta["val"] = _fake(transfer_op("h2d"), *dev.args)
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
