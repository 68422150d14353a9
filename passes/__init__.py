"""Pure FX graph passes of offload_compiler: one pass per module, named with a verb.

Passes import ``torch`` and each other only, never ``offload_compiler``: they name the
transfer ops through ``torch.ops.offload`` (registered by ``offload_compiler.runtime``;
:func:`passes.nodes.transfer_op`). ``passes.nodes`` is the one home for what an FX node
is, ``passes.provenance`` for where it came from in the user's program. See README.md in this folder for the invariants they keep.
"""

from .analyze_candidates import Candidate, analyze_candidates, saved_values
from .annotate_streams import annotate_streams
from .insert_transfers import Offload, insert_transfers
from .keep_matmuls_early import keep_matmuls_early
from .name_saved_values import name_saved_values
from .schedule_prefetches import schedule_prefetches
from .schedule_releases import schedule_releases
from .transfer_meta import META_KEY, TransferMeta, transfer_meta, transfer_nodes

__all__ = [
    "Candidate",
    "META_KEY",
    "Offload",
    "TransferMeta",
    "analyze_candidates",
    "annotate_streams",
    "insert_transfers",
    "keep_matmuls_early",
    "name_saved_values",
    "saved_values",
    "schedule_prefetches",
    "schedule_releases",
    "transfer_meta",
    "transfer_nodes",
]
