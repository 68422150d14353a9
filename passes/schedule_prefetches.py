"""Schedule: issue each backward reload early enough to overlap with compute.

Reloads are ordered by the position of their ``wait`` (the first use of the value).
With prefetch depth ``d``, the k-th reload is issued right after the first tensor
computed once the (k - d)-th reload has been consumed; the first ``d`` are issued at
the top of the graph. With the planner's schedule (``issue_before``), each reload goes
just before the node the simulation chose.

The node a reload is placed after becomes its ``anchor`` argument: without that data
dependency Inductor hoists an op whose inputs are all graph inputs to the top of the
graph, and every reload would be issued at once. Anchors are tensors Inductor writes
to memory anyway (:func:`~passes.materialization.materialization_points`: a matmul's result, a
matmul's input); for a reload the planner placed, the nearest one its target is
computed from (:func:`~passes.placement.anchor_feeding`: Inductor runs it before the
target whatever order it picks), else the nearest one at or before the intended point,
so a reload may go a few nodes early, never after an earlier-needed one (the H2D
stream runs them in issue order).

:func:`link_calls` (``per_block``) links a graph to the calls before and after it in a
chain of calls (one compiled block per layer): the forward registers the host copies its
backward reloads first (``offload::push_reloads`` before the output), the backward
prefetches those of the next backward once its own reloads are issued
(``offload::prefetch_next``, or before the node the planner chose, ``issue_before``'s
:data:`NEXT_CALL`), and the releases left at the end of the forward become
``offload::release_later``: the next graph completes them (see
``offload_compiler/runtime/chain.py``).
"""

from __future__ import annotations

import torch.fx as fx

from .materialization import materialization_points
from .nodes import is_tensor_op, is_view_or_getitem, transfer_op
from .placement import anchor_before, anchor_feeding
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
            target = nodes[min(pos[planned], pos[wait])]
            anchor = anchor_feeding(target) or anchor_before(target.prev)
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


#: The key of ``issue_before`` naming the backward node before which the next call's
#: first reloads are prefetched (never the name of an offloaded value).
NEXT_CALL = "<next call>"


def link_calls(fw_gm: fx.GraphModule, bw_gm: fx.GraphModule, before: fx.Node | None = None) -> None:
    """Link a graph to the calls before and after it in a chain (see the module
    docstring): ``before`` is where the backward prefetches the next call's first
    reloads (``None``: right after its own last reload is issued)."""
    # Only the default transfer ops (host copies as graph values) link: other variants of
    # the ops (any whose arguments differ) are left as they are.
    h2ds = transfer_nodes(bw_gm.graph, "h2d")
    if not h2ds or any(h.target is not transfer_op("h2d") for h in h2ds):
        return
    fw, bw = fw_gm.graph, bw_gm.graph
    device = h2ds[0].args[2]
    # Issued at the top: unanchored, not packed (the prefetch restores no strides).
    firsts = [h for h in h2ds if h.args[1] is None and h.args[3] is None and h.args[2] == device]
    copies = {transfer_meta(n).value: n for n in transfer_nodes(fw, "d2h")}
    (out,) = fw.find_nodes(op="output")
    with fw.inserting_before(out):
        push = fw.call_function(transfer_op("push_reloads"), (
            copies[transfer_meta(h2ds[0]).value], [copies[transfer_meta(h).value] for h in firsts],
            device))
    push.meta["val"] = None
    pos = {n: i for i, n in enumerate(bw.nodes)}
    after, anchor = h2ds[-1], h2ds[-1]  # its result: in memory, and ordered after every reload
    if before is not None and pos[before] > pos[after]:
        planned = anchor_before(before.prev)
        after = before.prev
        anchor = planned if planned is not None and pos[planned] > pos[anchor] else anchor
    with bw.inserting_after(after):
        prefetch = bw.call_function(transfer_op("prefetch_next"), (h2ds[0].args[0], anchor))
    prefetch.meta["val"] = None
    for release in _releases_at_end(fw):
        if release.target is transfer_op("release"):
            release.target = transfer_op("release_later")
    for gm in (fw_gm, bw_gm):
        gm.graph.lint()
        gm.recompile()


def _releases_at_end(graph: fx.Graph) -> list[fx.Node]:
    """The releases no kernel follows (views and ``getitem`` run none): their wait
    would end the forward."""
    out = []
    for node in reversed(graph.nodes):
        if is_tensor_op(node) and not is_view_or_getitem(node):
            break
        meta = transfer_meta(node)
        if meta is not None and meta.kind == "release":
            out.append(node)
    return out
