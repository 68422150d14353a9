"""Annotate: name the stream each transfer node runs on and the event it records or waits.

Copies record an event on their copy stream; ``release`` and ``wait`` make the live
compute stream wait on it. The names are logical (one per transfer); the runtime
records a fresh CUDA event each time the graph runs.
"""

from __future__ import annotations

import dataclasses

import torch.fx as fx

from .transfer_meta import META_KEY, transfer_meta, transfer_nodes

_STREAM = {"d2h": "d2h", "release": "compute", "h2d": "h2d", "wait": "compute"}
_EVENT = {"d2h": "d2h", "release": "d2h", "h2d": "h2d", "wait": "h2d"}


def annotate_streams(*gms: fx.GraphModule) -> None:
    for gm in gms:
        for node in transfer_nodes(gm.graph):
            meta = transfer_meta(node)
            node.meta[META_KEY] = dataclasses.replace(
                meta,
                stream=_STREAM[meta.kind],
                event=f"{_EVENT[meta.kind]}_done_{meta.transfer_id}",
            )
