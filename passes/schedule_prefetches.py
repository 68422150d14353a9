"""Schedule: issue each backward reload early enough to overlap with compute.

Reloads are ordered by the position of their ``wait`` (the first use of the value).
With prefetch depth ``d``, the k-th reload is issued right after the first tensor
computed once the (k - d)-th reload has been consumed; the first ``d`` are issued at
the top of the graph. With the planner's schedule (``issue_before``), each reload goes
just before the node the simulation chose.

The node a reload is placed after becomes its ``anchor`` argument: without that data
dependency Inductor hoists an op whose inputs are all graph inputs to the top of the
graph, and every reload would be issued at once. Anchors are tensors Inductor writes
to memory anyway (:func:`~passes.nodes.materialization_points`: a matmul's result, a
matmul's input); the nearest one at or before the intended point is taken, so a reload
may go a few nodes early, never after an earlier-needed one (the H2D stream runs them
in issue order).
"""

from __future__ import annotations

import torch.fx as fx

from .nodes import materialization_points, transfer_op
from .placement import anchor_before
from .transfer_meta import transfer_meta, transfer_nodes


def schedule_prefetches(
    bw_gm: fx.GraphModule, depth: int, issue_before: dict[str, fx.Node] | None = None
) -> None:
    """Place reloads ``depth`` ahead, or before the node ``issue_before`` names for the
    offloaded value (the planner's schedule), each anchored as the module says."""
    graph = bw_gm.graph
    waits = transfer_nodes(graph, "wait")
    if not waits:
        return
    nodes = list(graph.nodes)
    pos = {n: i for i, n in enumerate(nodes)}
    top = graph.find_nodes(op="placeholder")[-1]  # reloads issued first go after it
    done = materialization_points(graph)
    last = None  # the previous anchored reload
    for k, wait in enumerate(waits):
        h2d = wait.args[0]
        assert transfer_meta(h2d) is not None and h2d.target is transfer_op("h2d")
        planned = issue_before.get(transfer_meta(h2d).value) if issue_before else None
        if planned is not None:
            anchor = anchor_before(nodes[min(pos[planned], pos[wait]) - 1])
        elif depth == 0:
            anchor = anchor_before(wait.prev)  # right before the first use
        elif k < depth:
            anchor = None
        else:
            after = [n for n in nodes[pos[waits[k - depth]] + 1 : pos[wait]]
                     if done.get(n, len(nodes)) < pos[wait]]
            anchor = after[0] if after else anchor_before(wait.prev)
        if anchor is None:
            top.append(h2d)
            top = h2d
        elif last is not None and pos[anchor] <= pos[last.args[1]]:
            # Never ahead of the previous reload: the H2D stream runs them in order.
            anchor = last.args[1]
            last.append(h2d)
        else:
            anchor.append(h2d)
        h2d.update_arg(1, anchor)
        last = h2d if anchor is not None else last
    graph.lint()
    bw_gm.recompile()
