"""Materialization: whether and where Inductor writes a value to memory, in two senses
that answer two questions:

- :func:`is_materialized`: *whether* Inductor likely writes a value to memory at all
  (the cost model and liveness ask this of every node, many times: within
  :func:`graphs_fixed`, each node's answer is kept);
- :func:`materialization_points` and :func:`materialized_at`: *where* in the graph a
  value is written whatever the passes do, the node that forces it (the placement of
  transfers asks this, since an anchor must already be in memory there).
"""

from __future__ import annotations

import contextlib
import contextvars
import operator
from typing import Iterator, Mapping

import torch.fx as fx

from .nodes import is_extern, is_free, is_tensor_op, is_transfer

_MATERIALIZED: contextvars.ContextVar[dict[fx.Node, bool] | None] = contextvars.ContextVar(
    "passes_materialized", default=None)


@contextlib.contextmanager
def graphs_fixed() -> Iterator[None]:
    """A scope in which no graph changes: :func:`is_materialized` walks each node's
    readers once and keeps the answer until the scope ends (the planner's facts ask it
    of every node from the cost model, the liveness and the step's transients)."""
    token = _MATERIALIZED.set({})
    try:
        yield
    finally:
        _MATERIALIZED.reset(token)


def is_materialized(node: fx.Node) -> bool:
    """Whether Inductor likely writes ``node`` to memory: a graph input, an extern
    kernel's result, or a value an extern kernel or the graph output reads."""
    memo = _MATERIALIZED.get()
    if memo is None:
        return _is_materialized(node)
    known = memo.get(node)
    if known is None:
        known = memo[node] = _is_materialized(node)
    return known


def _is_materialized(node: fx.Node) -> bool:
    if node.op == "placeholder" or is_extern(node):
        return True
    todo, seen = list(node.users), set()
    while todo:  # look through views and getitems
        u = todo.pop()
        if u in seen:
            continue
        seen.add(u)
        if u.op == "output" or is_extern(u):
            return True
        if is_free(u):
            todo.extend(u.users)
    return False


def materialization_points(graph: fx.Graph) -> dict[fx.Node, int]:
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
    pos = {n: i for i, n in enumerate(graph.nodes)}
    return {n: at for n in pos if (at := materialized_at(n, pos)) is not None}


def materialized_at(node: fx.Node, pos: Mapping[fx.Node, int]) -> int | None:
    """:func:`materialization_points` for one node, from its neighbours alone: the
    position (in ``pos``, every node of its graph in order) of the node that makes
    Inductor write ``node`` to memory, or ``None`` where none does. The placement of
    each transfer asks it of a few nodes, on a graph that changed since the last."""
    if not is_tensor_op(node):
        return None
    at = [pos[u] for u in node.users
          if u.op == "call_function" and (is_extern(u) or is_transfer(u))]
    if is_extern(node):
        at.append(pos[node])
    if node.target is operator.getitem:  # of an extern kernel's results
        at += [pos[p] for p in node.all_input_nodes if is_extern(p)]
    return min(at, default=None)
