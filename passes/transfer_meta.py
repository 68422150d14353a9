"""The ``node.meta["offload"]`` record every transfer node carries.

One frozen dataclass per transfer node. Nodes are found through this record, never by
name: :func:`transfer_nodes` lists them in graph order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch.fx as fx

META_KEY = "offload"

Kind = Literal["d2h", "release", "h2d", "wait"]


@dataclass(frozen=True)
class TransferMeta:
    kind: Kind
    """``d2h`` (forward copy out), ``release`` (forward: wait for it, let the device
    storage go), ``h2d`` (backward copy in), ``wait`` (backward: wait for it)."""
    transfer_id: int
    """Index of the offloaded activation within its graph; pairs the four nodes."""
    value: str
    """Name of the offloaded activation in the forward graph."""
    nbytes: int
    """Bytes copied (the size hint under dynamic shapes)."""
    stream: str = ""
    """Stream the node's work is queued on: ``d2h``, ``h2d`` or ``compute``."""
    event: str = ""
    """Logical event the node records (copies) or waits on (release, wait)."""
    paired: str = ""
    """Name of the node this one pairs with (d2h<->release, h2d<->wait)."""
    reason: str = ""
    """Why the activation was offloaded."""

    def __str__(self) -> str:
        verb = "records" if self.kind in ("d2h", "h2d") else "waits"
        return (
            f"{self.kind} #{self.transfer_id} of {self.value}: stream={self.stream} "
            f"{verb} event={self.event} nbytes={self.nbytes} paired={self.paired}"
        )


def transfer_meta(node: fx.Node) -> TransferMeta | None:
    meta = node.meta.get(META_KEY)
    return meta if isinstance(meta, TransferMeta) else None


def transfer_nodes(graph: fx.Graph, kind: Kind | None = None) -> list[fx.Node]:
    """Transfer nodes of ``graph`` in graph order, optionally of one ``kind``."""
    out = []
    for node in graph.nodes:
        meta = transfer_meta(node)
        if meta is not None and (kind is None or meta.kind == kind):
            out.append(node)
    return out
