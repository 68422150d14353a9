"""Insert: turn each offload decision into four transfer nodes.

Forward, for a saved activation ``x``:

- ``x_host = offload.d2h(x)`` before the first extern kernel (matmul, attention) after
  ``x``'s producer: only fused work lies between, and Inductor writes ``x`` out where
  it would anyway (see :func:`_copy_point`);
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

import operator

import torch
import torch.fx as fx
from torch.utils.flop_counter import flop_registry

from offload_compiler.runtime import ops

from .analyze_candidates import alias_closure, is_dense, is_view_node
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


def materialized(graph: fx.Graph) -> dict[fx.Node, int]:
    """When Inductor writes a computed tensor to memory whatever we do: for each such
    tensor, the position (index in graph order) of the node that makes it so. That is
    the tensor's own node for the result of an extern kernel (matmul, attention,
    convolution; also their ``getitem``s), and the first extern kernel or transfer op
    that reads it otherwise.

    An anchor is an extra input of an extern op, so Inductor materializes it where the
    op is lowered. A tensor not materialized by then (a pointwise result its consumers
    would fuse, or a saved value only written out at the end of the graph) would be
    written there instead, which splits fusions: more kernels, more memory traffic.
    """
    found: dict[fx.Node, int] = {}
    for i, node in enumerate(graph.nodes):
        if node.op != "call_function":
            continue
        extern = _is_extern(node)
        if extern or node.target in ops.TRANSFER_OPS:
            for n in node.all_input_nodes:
                found.setdefault(n, i)
        if extern:
            found.setdefault(node, i)
            for u in node.users:
                if u.target is operator.getitem:
                    found.setdefault(u, i)
    return {n: i for n, i in found.items() if is_tensor_op(n)}


def anchor_before(node: fx.Node) -> fx.Node | None:
    """The anchor of an op that should run right after ``node``: the nearest tensor
    at or before ``node`` already :func:`materialized` by then (the op may then be
    issued a little earlier than asked), else the nearest computed tensor (``None``
    only when nothing is computed before ``node``: the op belongs at the top).
    """
    done = materialized(node.graph)
    nodes = list(node.graph.nodes)
    at = nodes.index(node)
    nearest = None
    for cur in reversed(nodes[: at + 1]):
        if is_tensor_op(cur):
            if done.get(cur, at + 1) <= at:
                return cur
            nearest = nearest or cur
    return nearest


def release_point(node: fx.Node, floor: fx.Node) -> tuple[fx.Node, fx.Node | None]:
    """``(after, anchor)`` for a ``release`` meant to follow ``node``, of the value
    ``floor``: the release goes right after ``after``, anchored on ``anchor``.

    The anchor is the nearest tensor after ``floor`` and at or before ``node`` that is
    already :func:`materialized` there (the release stays after ``node``); else the
    first extern result after ``node`` (the release moves there: a little later, which
    holds memory a little longer and never stalls compute); else the nearest computed
    tensor after ``floor``, or ``None``.
    """
    done = materialized(node.graph)
    nodes = list(node.graph.nodes)
    at, low = nodes.index(node), nodes.index(floor)
    window = nodes[low + 1 : at + 1]
    for cur in reversed(window):
        if done.get(cur, at + 1) <= at:
            return node, cur
    for i, cur in enumerate(nodes[at + 1 :], start=at + 1):
        if done.get(cur, i + 1) <= i:  # an extern result (or one of its getitems)
            return cur, cur
    return node, next((n for n in reversed(window) if is_tensor_op(n)), None)


def _copy_point(x: fx.Node) -> fx.Node:
    """Where ``d2h(x)`` goes: right before the first extern kernel (matmul, attention)
    after ``x``. The copy makes Inductor write ``x`` to memory where it is lowered;
    earlier, the pointwise and reduction work up to that kernel, which reads ``x`` in
    registers where it is fused, would read it from memory in separate kernels. Only
    that fused work lies between, so the copy starts about as early.
    """
    cur = x.next
    while cur.op == "call_function" and not _is_extern(cur):
        cur = cur.next
    return cur


def _read_by_extern_only(node: fx.Node) -> bool:
    """Every reader of ``node`` (through views) is an extern kernel or transfer op:
    Inductor writes ``node`` to memory for them, and the kernel computing it ends there."""
    readers = list(node.users)
    if not readers:
        return False
    for u in readers:
        if u.op != "call_function":
            return False
        if _is_extern(u) or u.target in ops.TRANSFER_OPS:
            continue
        if not ((is_view_node(u) or u.target is operator.getitem) and _read_by_extern_only(u)):
            return False
    return True


def _wait_point(first: fx.Node) -> fx.Node:
    """Where the reload of a value whose first reader is ``first`` goes (with its
    ``wait``): at the kernel boundary before ``first``. Walking back from ``first``,
    the boundary is the first extern kernel or transfer op met, or the first value
    only extern kernels read (the fused kernel that computes it ends there). Placed
    between fused nodes, a wait splits them (Inductor does not fuse across it).

    Walking back to the last extern kernel only waited too early: a reload first read
    by a recomputed layer norm was waited for before the loss's backward kernels,
    which end in the logits' gradient that only matmuls read; compute stood idle for
    the whole copy (1.2 ms of a 64 MiB reload on an H100, ``benchmarks/RESULTS.md``,
    session 6).
    """
    cur = first
    while True:
        prev = cur.prev
        if (prev.op != "call_function" or _is_extern(prev) or prev.target in ops.TRANSFER_OPS
                or _read_by_extern_only(prev)):
            return cur
        cur = prev


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
        with fw.inserting_before(_copy_point(x)):
            dense = is_dense(dev_val)
            host = fw.call_function(ops.D2H, (x, dense))
        host.meta["val"] = _fake(ops.D2H, *host.args)
        order = {n: i for i, n in enumerate(fw.nodes)}
        users = [u for n in alias_closure(x) for u in n.users if u.op != "output"]
        last = max(users + [host], key=order.__getitem__)
        after, anchor = release_point(last, floor=x)
        with fw.inserting_after(after):
            release = fw.call_function(ops.RELEASE, (x, host, anchor))
        release.meta["val"] = None
        index = next(i for i in range(num_fwd_outputs, len(new_outputs)) if new_outputs[i] is x)
        new_outputs[index] = host
        # -- backward: copy in at the kernel boundary before the first consumer ------
        placeholder.meta["val"] = host.meta["val"]
        first = next(n for n in bw.nodes if n in placeholder.users)
        with bw.inserting_before(_wait_point(first)):
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
