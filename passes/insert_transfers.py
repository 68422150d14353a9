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

:func:`use_graph_slots` (after scheduling, for graphs run under CUDA graphs) turns the
transfers into their token form (``torch.ops.offload.<op>.slot``): the forward returns a
one-byte token on the device in each host copy's place, so neither graph has a CPU
tensor among its inputs or outputs, and the reload reads the host buffer through it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.fx as fx

from .nodes import alias_closure, is_dense, transfer_op
from .placement import copy_point, release_point, wait_point
from .provenance import value_label
from .transfer_meta import META_KEY, TransferMeta, transfer_meta, transfer_nodes

#: Overload of the transfer ops that passes a token instead of a host tensor.
SLOT_OVERLOAD = "slot"


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


def slot_op(name: str):
    """``torch.ops.offload.<name>.slot`` (``"d2h"``, ``"release"``, ``"h2d"``)."""
    return getattr(transfer_op(name).overloadpacket, SLOT_OVERLOAD)


def use_graph_slots(fw_gm: fx.GraphModule, bw_gm: fx.GraphModule) -> None:
    """Turn the transfers of ``fw_gm`` and ``bw_gm`` (inserted and scheduled) into their
    token form, in place; node names, order and ``meta["offload"]`` stay:

    - ``d2h(x, dense)`` becomes ``d2h.slot(x, dense, slot, label)``, returning the token
      that the forward saves for backward in the host copy's place;
    - ``release(x, host, anchor)`` becomes ``release.slot(x, token, anchor)``;
    - the backward placeholder receives the token, and ``h2d(token, anchor, device,
      stride)`` becomes ``h2d.slot(token, anchor, device, size, stride, dtype,
      keep_strides, slot, label)`` (the value's size, strides and dtype are constants);
    - ``wait`` stays.

    ``slot`` is the transfer id; ``label`` names the value's module and source line."""
    labels = {}
    for node in transfer_nodes(fw_gm.graph):
        meta = transfer_meta(node)
        if meta.kind == "d2h":
            x, dense = node.args
            labels[meta.transfer_id] = value_label(x)
            node.target = slot_op("d2h")
            node.args = (x, dense, meta.transfer_id, labels[meta.transfer_id])
            node.meta["val"] = _fake(node.target, *node.args)
        elif meta.kind == "release":
            node.target = slot_op("release")
    tokens = {transfer_meta(n).transfer_id: n for n in transfer_nodes(fw_gm.graph, "d2h")}
    for node in transfer_nodes(bw_gm.graph, "h2d"):
        meta = transfer_meta(node)
        token, anchor, device, stride = node.args
        val = node.meta["val"]
        token.meta["val"] = tokens[meta.transfer_id].meta["val"]
        node.target = slot_op("h2d")
        node.args = (token, anchor, device, list(val.shape), list(val.stride()), val.dtype,
                     stride is None, meta.transfer_id, labels[meta.transfer_id])
    for gm in (fw_gm, bw_gm):
        gm.graph.lint()
        gm.recompile()
