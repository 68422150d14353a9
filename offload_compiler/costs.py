"""Node costs: estimated milliseconds for each node of an FX graph.

A roofline per node: the larger of FLOPs over the matmul rate (FLOPs from
``torch.utils.flop_counter``'s formulas) and bytes read and written over the memory
bandwidth, plus a fixed launch cost. Views, ``getitem`` and the transfer ops cost
nothing. Inductor fuses pointwise chains, so this overestimates them; matmuls and
attention, which decide what is worth recomputing, are estimated well.
"""

from __future__ import annotations

import operator

import torch
import torch.fx as fx
from torch.utils.flop_counter import flop_registry

from passes.analyze_candidates import is_view_node, size_hint, tensor_nbytes

from .hardware import HardwareProfile
from .runtime import ops


def _vals(x):
    if isinstance(x, fx.Node):
        return x.meta.get("val")
    if isinstance(x, (list, tuple)):
        return type(x)(_vals(v) for v in x)
    return x


def _tensor_bytes(x) -> int:
    if isinstance(x, torch.Tensor):
        return tensor_nbytes(x) or 0
    if isinstance(x, (list, tuple)):
        return sum(_tensor_bytes(v) for v in x)
    return 0


def node_flops(node: fx.Node) -> int:
    """FLOPs of ``node`` by torch's flop formulas (0 for ops it does not count)."""
    target = node.target
    packet = getattr(target, "overloadpacket", None)
    fn = flop_registry.get(packet) if packet is not None else None
    if fn is None:
        return 0
    try:
        flops = fn(*_vals(node.args), **_vals(node.kwargs), out_val=node.meta.get("val"))
    except Exception:  # a formula that does not accept these arguments
        return 0
    hint = size_hint(flops) if not isinstance(flops, int) else flops
    return int(hint or 0)


def _dtype(node: fx.Node) -> torch.dtype:
    val = node.meta.get("val")
    if isinstance(val, (list, tuple)):
        val = next((v for v in val if isinstance(v, torch.Tensor)), None)
    return val.dtype if isinstance(val, torch.Tensor) else torch.float32


def node_ms(node: fx.Node, hw: HardwareProfile) -> float:
    """Estimated run time of ``node`` in milliseconds."""
    if node.op != "call_function" or node.target is operator.getitem:
        return 0.0
    if node.target in ops.TRANSFER_OPS or is_view_node(node):
        return 0.0
    flops = node_flops(node)
    nbytes = _tensor_bytes(_vals(node.args)) + _tensor_bytes(node.meta.get("val"))
    compute_s = flops / hw.matmul_rate(_dtype(node)) if flops else 0.0
    memory_s = nbytes / (hw.memory_gbps * 1e9)
    return max(compute_s, memory_s) * 1e3 + hw.launch_us / 1e3


def graph_ms(nodes: list[fx.Node], hw: HardwareProfile) -> list[float]:
    return [node_ms(n, hw) for n in nodes]
