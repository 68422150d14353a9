"""Kernels: what op an FX node runs, and whether it is an extern kernel (a kernel of
its own, which Inductor does not fuse). One definition for the passes (where transfers
go, ``placement``; which matmuls Inductor defers, ``keep_matmuls_early``) and for
``offload_compiler``'s cost model and liveness.
"""

from __future__ import annotations

from typing import Any

import torch.fx as fx
from torch.utils.flop_counter import flop_registry

from offload_compiler.runtime import ops

from .analyze_candidates import is_view_or_getitem


#: Ops torch's flop counter has no formula for that are kernels of their own all the
#: same: the CPU flash attention of loopback runs and offline planning.
CPU_ATTENTION_OPS = ("_scaled_dot_product_flash_attention_for_cpu",
                     "_scaled_dot_product_flash_attention_for_cpu_backward")


def _rng_wrappers() -> dict[Any, int]:
    """The partitioner's RNG wrappers (it wraps a random op it recomputes, attention
    included, so both runs draw the same numbers), each with the position of the
    wrapped op among its arguments."""
    try:
        from torch._prims import rng_prims
    except ImportError:  # pragma: no cover
        return {}
    wrappers = {"graphsafe_run_with_rng_state": 0, "run_and_save_rng_state": 0, "run_with_rng_state": 1}
    return {getattr(rng_prims, name): i for name, i in wrappers.items() if hasattr(rng_prims, name)}


_RNG_WRAPPERS = _rng_wrappers()


def called_op(node: fx.Node) -> tuple[Any, tuple, dict]:
    """``(op, args, kwargs)`` that ``node`` runs: the wrapped op for the RNG wrappers."""
    at = _RNG_WRAPPERS.get(node.target) if node.op == "call_function" else None
    if at is None or len(node.args) <= at:
        return node.target, tuple(node.args), dict(node.kwargs)
    kwargs = {k: v for k, v in node.kwargs.items() if k != "rng_state"}
    return node.args[at], tuple(node.args[at + 1:]), kwargs


def is_extern(node: fx.Node) -> bool:
    """A kernel of its own, which Inductor does not fuse (matmul, attention,
    convolution): an op torch's flop counter has a formula for (``flop_registry``), or
    CPU flash attention, run directly or inside an RNG wrapper. Not a view,
    ``getitem`` or transfer op."""
    if node.op != "call_function" or node.target in ops.TRANSFER_OPS or is_view_or_getitem(node):
        return False
    packet = getattr(called_op(node)[0], "overloadpacket", None)
    return packet is not None and (packet in flop_registry or packet.__name__ in CPU_ATTENTION_OPS)
