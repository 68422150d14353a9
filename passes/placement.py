"""Placement: where transfer nodes go in a graph, so that Inductor's fusions survive.

Shared by the passes that insert and move transfers (``insert_transfers``,
``schedule_releases``, ``schedule_prefetches``):

- :func:`~passes.materialization.materialization_points`: when Inductor writes a tensor to memory whatever we do;
  anchors are chosen among those tensors (:func:`anchor_before`, :func:`anchor_feeding`,
  :func:`release_point`);
- kernel boundaries: a copy goes before the next extern kernel (:func:`copy_point`),
  a reload's wait at the nearest boundary before its first reader (:func:`wait_point`).

A transfer op between fused nodes, or an anchor on a value Inductor would have kept in
registers, splits fusions: more kernels, more memory traffic
(``tests/test_graph.py::test_transfers_split_no_fusion``).
"""

from __future__ import annotations


import torch.fx as fx

from .materialization import materialized_at
from .nodes import is_extern, is_tensor_op, is_transfer, is_view_or_getitem, view_root


def anchor_before(node: fx.Node) -> fx.Node | None:
    """The anchor of an op that should run right after ``node``: the nearest tensor
    at or before ``node`` already :func:`~passes.materialization.materialization_points` by then (the op may then be
    issued a little earlier than asked), else the nearest computed tensor (``None``
    only when nothing is computed before ``node``: the op belongs at the top).
    """
    nodes, pos = _order(node.graph)
    at = pos[node]
    nearest = None
    for cur in reversed(nodes[: at + 1]):
        if is_tensor_op(cur):
            if _done_by(cur, pos, at):
                return cur
            nearest = nearest or cur
    return nearest


def anchor_feeding(node: fx.Node) -> fx.Node | None:
    """The anchor of an op that should run right before ``node``, chosen among what
    ``node`` is computed from: the nearest tensor before ``node`` that ``node`` depends on
    and that is :func:`~passes.materialization.materialization_points` by then, or by ``node``
    itself where it is an extern kernel reading it (``None`` if there is none).

    Inductor may run a kernel later than its place in the graph, after kernels
    that come later there (it sorts a fused kernel by its earliest node); a tensor
    ``node`` is computed from runs before ``node`` in any order it picks, so an op
    anchored on it is never issued after ``node`` (:func:`anchor_before` picks the
    nearest tensor, related or not: on HF Llama a reload anchored on a weight
    gradient's matmul, which Inductor ran after the next layer norm's kernel, started
    after the compute that was to hide it)."""
    nodes, pos = _order(node.graph)
    at = pos[node]
    feeds, todo = set(), list(node.all_input_nodes)
    while todo:
        cur = todo.pop()
        if cur not in feeds:
            feeds.add(cur)
            todo.extend(cur.all_input_nodes)
    for cur in reversed(nodes[:at]):
        # A view of a graph input is written by no kernel: nothing orders an op on it.
        if (cur in feeds and is_tensor_op(cur) and _done_by(cur, pos, at)
                and view_root(cur).op != "placeholder"):
            return cur
    return None


def release_point(node: fx.Node, floor: fx.Node) -> tuple[fx.Node, fx.Node | None]:
    """``(after, anchor)`` for a ``release`` meant to follow ``node``, of the value
    ``floor``: the release goes right after ``after``, anchored on ``anchor``.

    The anchor is the nearest tensor after ``floor`` and at or before ``node`` that is
    already :func:`~passes.materialization.materialization_points` there (the release stays after ``node``); else the
    first extern result after ``node`` (the release moves there: a little later, which
    holds memory a little longer and never stalls compute); else the nearest computed
    tensor after ``floor``, or ``None``.
    """
    nodes, pos = _order(node.graph)
    at, low = pos[node], pos[floor]
    window = nodes[low + 1 : at + 1]
    for cur in reversed(window):
        if _done_by(cur, pos, at):
            return node, cur
    for i, cur in enumerate(nodes[at + 1 :], start=at + 1):
        if _done_by(cur, pos, i):  # an extern result (or one of its getitems)
            return cur, cur
    return node, next((n for n in reversed(window) if is_tensor_op(n)), None)


def _order(graph: fx.Graph) -> tuple[list[fx.Node], dict[fx.Node, int]]:
    """The nodes of ``graph`` in order, and each one's position."""
    nodes = list(graph.nodes)
    return nodes, {n: i for i, n in enumerate(nodes)}


def _done_by(node: fx.Node, pos: dict[fx.Node, int], at: int) -> bool:
    """``node`` is written to memory by position ``at``, whatever we do."""
    done = materialized_at(node, pos)
    return done is not None and done <= at


def copy_point(x: fx.Node) -> fx.Node:
    """Where ``d2h(x)`` goes: right before the first extern kernel (matmul, attention)
    after ``x``. The copy makes Inductor write ``x`` to memory where it is lowered;
    earlier, the pointwise and reduction work up to that kernel, which reads ``x`` in
    registers where it is fused, would read it from memory in separate kernels. Only
    that fused work lies between, so the copy starts about as early.
    """
    cur = x.next
    while cur.op == "call_function" and not is_extern(cur):
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
        if is_extern(u) or is_transfer(u):
            continue
        if not (is_view_or_getitem(u) and _read_by_extern_only(u)):
            return False
    return True


def wait_point(first: fx.Node) -> fx.Node:
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
        if (prev.op != "call_function" or is_extern(prev) or is_transfer(prev)
                or _read_by_extern_only(prev)):
            return cur
        cur = prev
