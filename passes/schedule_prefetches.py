"""Schedule: issue each backward reload early enough to overlap with compute.

Reloads are ordered by the position of their ``wait`` (the first use of the value).
With prefetch depth ``d``, the k-th reload is issued right after the first tensor
computed once the (k - d)-th reload has been consumed; the first ``d`` are issued at
the top of the graph. The node it is placed after becomes its ``anchor`` argument:
without that data dependency Inductor hoists an op whose inputs are all graph inputs
to the top of the graph, and every reload would be issued at once.

With the planner's schedule (``issue_before``), each reload goes just before the node
the simulation chose, anchored on the nearest matmul result there.
"""

from __future__ import annotations

import torch.fx as fx

from offload_compiler.runtime import ops

from .insert_transfers import anchor_before, is_tensor_op
from .transfer_meta import transfer_meta, transfer_nodes


def schedule_prefetches(
    bw_gm: fx.GraphModule, depth: int, issue_before: dict[str, fx.Node] | None = None
) -> None:
    """Place reloads ``depth`` ahead, or before the node ``issue_before`` names for the
    offloaded value (the planner's schedule), anchored on the tensor computed last."""
    graph = bw_gm.graph
    waits = transfer_nodes(graph, "wait")
    if not waits:
        return
    nodes = list(graph.nodes)
    pos = {n: i for i, n in enumerate(nodes)}
    top = graph.find_nodes(op="placeholder")[-1]  # reloads issued first go after it
    for k, wait in enumerate(waits):
        h2d = wait.args[0]
        assert transfer_meta(h2d) is not None and h2d.target is ops.H2D
        planned = issue_before.get(transfer_meta(h2d).value) if issue_before else None
        if planned is not None:
            # The nearest extern result (a matmul: materialized anyway, so anchoring on it
            # changes no fusion) before the planned point; else the nearest tensor.
            limit = min(pos[planned], pos[wait])
            floor = waits[k - 1] if k > 0 and pos[waits[k - 1]] < limit else None
            anchor = anchor_before(nodes[limit - 1], floor=floor)
        elif depth == 0:
            # Right before the first use, anchored on the last tensor computed before it.
            before = [n for n in nodes[: pos[wait]] if is_tensor_op(n)]
            anchor = before[-1] if before else None
        elif k < depth:
            anchor = None
        else:
            after = [n for n in nodes[pos[waits[k - depth]] + 1 : pos[wait]] if is_tensor_op(n)]
            before = [n for n in nodes[: pos[wait]] if is_tensor_op(n)]
            anchor = after[0] if after else (before[-1] if before else None)
        if anchor is None:
            top.append(h2d)
            top = h2d
        else:
            anchor.append(h2d)
        h2d.update_arg(1, anchor)
    graph.lint()
    bw_gm.recompile()
