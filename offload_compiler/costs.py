"""Node costs: estimated milliseconds for each node of an FX graph.

A roofline per node. Extern kernels (matmul, attention: FLOPs from
``torch.utils.flop_counter``'s formulas) cost the larger of FLOPs over the matmul rate
and bytes over the memory bandwidth. Other ops are assumed fused by Inductor into
their neighbours: they cost only the bytes they read from or write to materialized
buffers (graph inputs, extern results, values an extern kernel or the output reads).
Views, ``getitem`` and the transfer ops cost nothing.
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


def _free(node: fx.Node) -> bool:
    return (node.op != "call_function" or node.target is operator.getitem
            or node.target in ops.TRANSFER_OPS or is_view_node(node))


def _extern(node: fx.Node) -> bool:
    """A kernel of its own (matmul, attention, convolution): what Inductor does not fuse."""
    return node.op == "call_function" and not _free(node) and node_flops(node) > 0


def _materialized(node: fx.Node) -> bool:
    """Whether Inductor likely writes ``node`` to memory: a graph input, an extern
    kernel's result, or a value an extern kernel or the graph output reads."""
    if node.op == "placeholder" or _extern(node):
        return True
    todo, seen = list(node.users), set()
    while todo:  # look through views and getitems
        u = todo.pop()
        if u in seen:
            continue
        seen.add(u)
        if u.op == "output" or _extern(u):
            return True
        if _free(u):
            todo.extend(u.users)
    return False


def node_ms(node: fx.Node, hw: HardwareProfile) -> float:
    """Estimated run time of ``node`` in milliseconds.

    Extern kernels (FLOPs counted) cost the larger of compute and memory time. Other
    ops are assumed fused by Inductor: they cost only the bytes they read from and
    write to memory that is really materialized.
    """
    if _free(node):
        return 0.0
    flops = node_flops(node)
    out = node.meta.get("val")
    if flops:
        nbytes = _tensor_bytes(_vals(node.args)) + _tensor_bytes(out)
        return max(flops / hw.matmul_rate(_dtype(node)), nbytes / (hw.memory_gbps * 1e9)) * 1e3 \
            + hw.launch_us / 1e3
    reads = sum(_tensor_bytes(a.meta.get("val")) for a in node.all_input_nodes
                if _materialized(_storage_owner(a)))
    writes = _tensor_bytes(out) if _materialized(node) else 0
    launch = hw.launch_us / 1e3 if writes else 0.0
    return (reads + writes) / (hw.memory_gbps * 1e9) * 1e3 + launch


def _storage_owner(node: fx.Node) -> fx.Node:
    while _free(node) and node.op == "call_function" and node.all_input_nodes:
        node = node.all_input_nodes[0]
    return node


def graph_ms(nodes: list[fx.Node], hw: HardwareProfile) -> list[float]:
    return [node_ms(n, hw) for n in nodes]
