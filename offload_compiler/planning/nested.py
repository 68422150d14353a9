"""Where a recomputed activation is made when another recomputation reads it.

A recomputation runs right before the first backward op that reads its value, from the
values its chain reads (``facts``: saved values, graph inputs). Where one of those is
itself recomputed, backward makes it there, for the chain that reads it, and holds it
to its own last backward use (``passes/recompute_saved.py``: an op two chains share is
computed once, before the first of them): recomputing both a block's output and a
value of the next block read from it holds the first from the second's backward on,
which can be most of backward. The simulator counts it so (``recompute_points``), so the
solver sees what such a pair holds, and keeps or offloads one of them where that holds
less.
"""

from __future__ import annotations

from typing import Sequence

from ..decision import RECOMPUTE


def recompute_points(tensors: Sequence) -> dict[str, int]:
    """For each recomputed tensor of ``tensors`` (``simulator.SimTensor``), the backward op
    its recomputation runs before: its first backward use, or earlier where a recomputed
    tensor whose chain reads it (``read_by``) is made earlier. A reader is produced after
    what it reads, so readers are settled first, latest produced first."""
    points: dict[str, int] = {}
    for x in sorted((x for x in tensors if x.decision == RECOMPUTE), key=lambda x: -x.produced):
        points[x.name] = min([x.first_bw_use] + [points[r] for r in x.read_by if r in points])
    return points
