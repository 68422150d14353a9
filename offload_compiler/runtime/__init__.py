"""Runtime of the offload backend: copy streams, the host pool and the transfer ops
(``ops.py``; ``graph_slots.py``: their form for graphs run under CUDA graphs).

State lives here, outside any compiled graph, so that graphs compiled one block at a
time share streams and buffers.
"""

from . import chain, graph_slots, measure, ops, streams
from .pool import HostPool, PoolStats, empty_host_pool, host_pool

__all__ = ["HostPool", "PoolStats", "chain", "empty_host_pool", "graph_slots", "host_pool", "measure",
           "ops", "streams"]
