"""Schedule: move each forward release to where its copy is predicted to be done.

A release makes the compute stream wait for the D2H copy, then lets the storage go.
Right after the last use it may stall compute; at the end of the graph it frees
nothing during forward. The planner's simulation says after which node the copy has
finished; the release goes there, never before the last use of the value or of any
view of it.
"""

from __future__ import annotations

import torch.fx as fx

from .nodes import alias_closure
from .placement import release_point
from .transfer_meta import transfer_meta, transfer_nodes


def schedule_releases(fw_gm: fx.GraphModule, after: dict[str, fx.Node]) -> None:
    """``after`` maps an offloaded value's name to the node its release should follow."""
    graph = fw_gm.graph
    for release in transfer_nodes(graph, "release"):
        target = after.get(transfer_meta(release).value)
        if target is None:
            continue
        pos = {n: i for i, n in enumerate(graph.nodes)}
        src, host = release.args[0], release.args[1]
        users = [u for n in alias_closure(src) for u in n.users
                 if u.op != "output" and u is not release]
        earliest = max(users + [host], key=pos.__getitem__)
        if pos[target] < pos[earliest]:
            target = earliest
        target, anchor = release_point(target, floor=src)
        if target.next is not release:
            target.append(release)
        release.update_arg(2, anchor)
    graph.lint()
    fw_gm.recompile()
