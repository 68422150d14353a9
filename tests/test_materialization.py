"""``passes.materialization``: whether and where Inductor writes a value to memory."""

from __future__ import annotations

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from passes.materialization import graphs_fixed, is_materialized, materialization_points, materialized_at


def _graph():
    def f(x, w):
        a = x.sin()  # read by the matmul
        b = a @ w  # an extern kernel
        c = b.cos()  # read by a pointwise op only
        return c.exp()  # read by the graph's output

    gm = make_fx(f, tracing_mode="fake")(torch.randn(4, 4), torch.randn(4, 4))
    by_target = {n.target: n for n in gm.graph.nodes if n.op == "call_function"}
    aten = torch.ops.aten
    return gm, [by_target[op.default] for op in (aten.sin, aten.mm, aten.cos, aten.exp)]


def test_where_a_value_is_written_whatever_the_passes_do():
    """A matmul's result at its own position, what it reads at its position; a value
    only pointwise ops or the output read, and a graph input, nowhere: the same for one
    node (``materialized_at``) as for the whole graph (``materialization_points``)."""
    gm, (a, b, c, out) = _graph()
    pos = {n: i for i, n in enumerate(gm.graph.nodes)}
    x = next(iter(gm.graph.nodes))
    assert [materialized_at(n, pos) for n in (a, b, c, out, x)] == [pos[b], pos[b], None, None, None]
    assert materialization_points(gm.graph) == {a: pos[b], b: pos[b]}
    assert [is_materialized(n) for n in (a, b, c, out, x)] == [True, True, False, True, True]


def test_is_materialized_keeps_its_answers_within_graphs_fixed_only():
    """Within ``graphs_fixed`` each node's answer is kept (the graph does not change
    there); after it, a changed graph is read again."""
    gm, (a, b, c, out) = _graph()
    with graphs_fixed():
        assert not is_materialized(c)
        with gm.graph.inserting_after(c):
            mm = gm.graph.call_function(torch.ops.aten.mm.default, (c, c))
        mm.meta["val"] = c.meta["val"]
        assert not is_materialized(c)  # kept: the scope promised no change
    assert is_materialized(c)  # the matmul now reads it
