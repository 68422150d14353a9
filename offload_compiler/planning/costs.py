"""Node costs: estimated milliseconds for each node of an FX graph.

A roofline per node. Extern kernels (matmul, attention: FLOPs from
``torch.utils.flop_counter``'s formulas, causal attention counting only the scores its
mask keeps) cost the larger of FLOPs over the kernel's rate (the matmul rate, or the
calibrated attention rate of each direction) and bytes over the memory bandwidth.
Other ops are assumed fused by Inductor into their neighbours: they cost only the
bytes they read from or write to materialized buffers (graph inputs, extern results,
values an extern kernel or the output reads). An op that min-cut wrapped for RNG
replay costs what it wraps.
Views, ``getitem`` and the transfer ops cost nothing.

:class:`NodeCosts` is what the planner calls: the estimate above, or, in profiling
mode (``OffloadConfig(node_costs="profile")``), the measured time of each extern
kernel on its device, timed once per distinct signature at compile time.
"""

from __future__ import annotations

import logging
from typing import Any, Container

import torch
import torch.fx as fx
from torch.utils.flop_counter import flop_registry, sdpa_backward_flop_count, sdpa_flop_count

from passes.materialization import is_materialized
from passes.nodes import (CPU_ATTENTION_OPS, attention_direction, called_op, convolution_direction, is_extern,
                          is_free, node_values, op_argument, size_hint, tensor_bytes)

from .hardware import HardwareProfile, causal_fraction, time_ms

log = logging.getLogger(__name__)


def _shape(x):
    return x.shape if isinstance(x, torch.Tensor) else None


def _cpu_attention_flops(query, key, value, *args, **kwargs):
    return sdpa_flop_count(_shape(query), _shape(key), _shape(value))


def _cpu_attention_backward_flops(grad_out, query, key, value, *args, **kwargs):
    return sdpa_backward_flop_count(_shape(grad_out), _shape(query), _shape(key), _shape(value))


#: Ops torch's flop counter has no formula for, counted like their CUDA counterparts
#: (the CPU flash attention of loopback runs and offline planning).
_EXTRA_FLOPS = dict(zip(CPU_ATTENTION_OPS, (_cpu_attention_flops, _cpu_attention_backward_flops)))


def _attention_mask_fraction(node: fx.Node) -> float:
    if attention_direction(node) is None or op_argument(node, "is_causal") is not True:
        return 1.0
    q, k = node_values(op_argument(node, "query")), node_values(op_argument(node, "key"))
    if not isinstance(q, torch.Tensor) or not isinstance(k, torch.Tensor):
        return 1.0
    lq, lk = size_hint(q.shape[-2]), size_hint(k.shape[-2])
    return causal_fraction(int(lq or 0), int(lk or 0))


def node_flops(node: fx.Node) -> int:
    """FLOPs of ``node`` by torch's flop formulas (0 for ops it does not count); for
    causal attention, only the scores the mask keeps (torch's formula counts them all)."""
    target, args, kwargs = called_op(node)
    packet = getattr(target, "overloadpacket", None)
    fn = (flop_registry.get(packet) or _EXTRA_FLOPS.get(packet.__name__)) if packet is not None else None
    if fn is None:
        return 0
    try:
        flops = fn(*node_values(args), **node_values(kwargs), out_val=node.meta.get("val"))
    except Exception:  # a formula that does not accept these arguments
        return 0
    hint = size_hint(flops) if not isinstance(flops, int) else flops
    return int((hint or 0) * _attention_mask_fraction(node))


def _rate(node: fx.Node, hw: HardwareProfile) -> float:
    """FLOP/s of ``node``'s kernel: in a low-precision dtype, the calibrated attention
    rates for fused attention (those of attention given a mask where it is given one and
    they were measured) and the calibrated convolution rates for a convolution (where
    measured); else the matmul rate of its dtype."""
    dtype = _dtype(node)
    if dtype in (torch.float32, torch.float64):
        return hw.matmul_rate(dtype)
    conv = convolution_direction(node)
    if conv is not None:
        tflops = hw.conv_tflops if conv == "forward" else hw.conv_backward_tflops
        return tflops * 1e12 if tflops else hw.matmul_rate(dtype)
    direction = attention_direction(node)
    if direction is None:
        return hw.matmul_rate(dtype)
    forward = direction == "forward"
    tflops = hw.attention_tflops if forward else hw.attention_backward_tflops
    if has_mask(node):
        tflops = (hw.attention_masked_tflops if forward else hw.attention_masked_backward_tflops) or tflops
    return tflops * 1e12


def has_mask(node: fx.Node) -> bool:
    """Whether an attention op is given an explicit mask (``attn_mask``, or ``attn_bias``
    as the efficient and cuDNN kernels name it)."""
    return any(op_argument(node, name) is not None for name in ("attn_mask", "attn_bias"))


def _dtype(node: fx.Node) -> torch.dtype:
    val = _some_tensor(node)
    return val.dtype if val is not None else torch.float32


def node_ms(node: fx.Node, hw: HardwareProfile, fused_reads: Container[fx.Node] = frozenset()) -> float:
    """Estimated run time of ``node`` in milliseconds.

    Extern kernels (FLOPs counted) cost the larger of compute and memory time. Other
    ops are assumed fused by Inductor: they cost only the bytes they read from and
    write to memory that is really materialized, less reads of ``fused_reads`` (values
    a fused kernel next to it reads anyway: ``fusion.recompute_free_reads``), and no
    launch where it shares such a read (:func:`_shares_read`): it runs inside that kernel.
    """
    if is_free(node):
        return 0.0
    flops = node_flops(node)
    out = node.meta.get("val")
    if flops:
        nbytes = tensor_bytes(node_values(node.args)) + tensor_bytes(out)
        return max(flops / _rate(node, hw), nbytes / (hw.memory_gbps * 1e9)) * 1e3 \
            + hw.launch_us / 1e3
    reads = sum(tensor_bytes(a.meta.get("val")) for a in node.all_input_nodes
                if is_materialized(_storage_owner(a)) and _storage_owner(a) not in fused_reads)
    writes = tensor_bytes(out) if is_materialized(node) else 0
    inside = fused_reads and _shares_read(node, getattr(fused_reads, "shared", fused_reads))
    launch = hw.launch_us / 1e3 if writes and not inside else 0.0
    return (reads + writes) / (hw.memory_gbps * 1e9) * 1e3 + launch


def _shares_read(node: fx.Node, fused_reads: Container[fx.Node]) -> bool:
    """Whether a value in memory that ``node`` is computed from (through the values not
    written to memory between) is in ``fused_reads``: a kernel of the backward reads it
    anyway and may run first, and Inductor fuses ``node`` into that kernel, with no
    launch of its own (``fusion.py``)."""
    todo, seen = list(node.all_input_nodes), set()
    while todo:
        owner = _storage_owner(todo.pop())
        if owner in seen:
            continue
        seen.add(owner)
        if is_materialized(owner):
            if owner in fused_reads:
                return True
        elif owner.op == "call_function":
            todo.extend(owner.all_input_nodes)
    return False


def _storage_owner(node: fx.Node) -> fx.Node:
    while is_free(node) and node.op == "call_function" and node.all_input_nodes:
        node = node.all_input_nodes[0]
    return node


def chain_ms(chain: list[fx.Node], cost: "NodeCosts",
             fused_in_backward: Container[fx.Node] = frozenset()) -> float:
    """Milliseconds to recompute ``chain`` (joint-graph nodes, its root first) in backward.

    Extern nodes cost what ``cost`` gives. The other nodes are taken as fused into few
    kernels that read each value they take from outside the chain once (saved values
    and inputs: materialized in backward), read extern results of the chain, and write
    the root's storage (backward reads it) and the values extern nodes of the chain
    read. :func:`node_ms` alone would miss those reads and writes: in the joint graph
    they look like fusible pointwise traffic.

    A value from outside the chain that ``fused_in_backward`` holds (the backward's
    fused kernels read it anyway, as a GELU's backward reads the matmul result that the
    GELU is recomputed from) costs no read: Inductor computes the recomputation in the
    kernel that reads it, and launches no kernel of its own. Measured on an H100 (``benchmarks/RESULTS.md``, session 6),
    recomputing a 256 MiB GELU output added 97 us to the GELU backward's kernel, the
    write alone; reads and write together were priced at 180 us.
    """
    inside = set(chain)
    total, reads, writes, shared = 0.0, set(), set(), False
    root = _storage_owner(chain[0])
    if root in inside and not is_extern(root):
        writes.add(root)
    for n in chain:
        if is_free(n):
            continue
        if is_extern(n):
            total += cost(n)
            writes.update(_storage_owner(a) for a in n.all_input_nodes
                          if _storage_owner(a) in inside and not is_extern(_storage_owner(a)))
            continue
        for a in n.all_input_nodes:
            owner = _storage_owner(a)
            if owner in inside and not is_extern(owner):
                continue
            if owner in fused_in_backward:
                shared = True
            else:
                reads.add(owner)
    nbytes = sum(tensor_bytes(n.meta.get("val")) for n in reads | writes)
    # Sharing a read with a kernel of the backward, it runs inside that kernel.
    launches = 0.0 if shared else len(writes) * cost.hw.launch_us / 1e3
    return total + nbytes / (cost.hw.memory_gbps * 1e9) * 1e3 + launches


class NodeCosts:
    """Milliseconds per node: :func:`node_ms`, or with ``profile=True`` the measured time
    of extern kernels (matmul, attention, convolution) on their own device.

    Each distinct signature (op, argument shapes, strides, dtypes, devices and plain
    arguments) is timed once per process: random inputs of those shapes, one warm-up,
    then ``repeat`` runs back to back (as kernels run in a step), three times; the
    median per run. A node that cannot be run (an error, no memory, an unbacked size)
    falls back to the estimate. CPU nodes always estimate.
    """

    def __init__(self, hw: HardwareProfile, profile: bool = False, repeat: int = 5,
                 fw_scale: float = 1.0, bw_scale: float = 1.0, recompute_scale: float = 1.0) -> None:
        self.hw = hw
        self.profile = profile
        self.repeat = repeat
        self.fw_scale = fw_scale
        """Measured over estimated compute of the forward (``planning/replan.py``); the
        facts (``facts.gather``) scale forward node times and recomputations by it."""
        self.bw_scale = bw_scale
        """The same for the backward's node times."""
        self.recompute_scale = recompute_scale
        """Measured over estimated recomputation, on top of those (``judging.recompute_fitted``)."""

    def __call__(self, node: fx.Node, fused_reads: Container[fx.Node] = frozenset()) -> float:
        key = None
        if self.profile and is_extern(node) and _device_type(node) == "cuda":
            key = _signature(node)
        if key is not None and key not in _timed:
            _timed[key] = _time_node(node, self.repeat)
        ms = _timed.get(key) if key is not None else None
        return node_ms(node, self.hw, fused_reads) if ms is None else ms


# Measured times by signature, for the life of the process (shared across graphs).
_timed: dict[tuple, float | None] = {}


def _some_tensor(node: fx.Node) -> torch.Tensor | None:
    """``node``'s first tensor result, else its first tensor input (the RNG wrappers
    carry no result metadata)."""
    val = node.meta.get("val")
    if isinstance(val, (list, tuple)):
        val = next((v for v in val if isinstance(v, torch.Tensor)), None)
    if not isinstance(val, torch.Tensor):
        val = next((v for v in (a.meta.get("val") for a in node.all_input_nodes)
                    if isinstance(v, torch.Tensor)), None)
    return val


def _device_type(node: fx.Node) -> str:
    val = _some_tensor(node)
    return val.device.type if val is not None else "cpu"


def _describe(x: Any):
    """A hashable description of one argument, or raise ``ValueError`` if it has no hint."""
    if isinstance(x, fx.Node):
        x = x.meta.get("val")
    if isinstance(x, torch.Tensor):
        shape = tuple(size_hint(d) for d in x.shape)
        stride = tuple(size_hint(d) for d in x.stride())
        if any(v is None for v in shape + stride):
            raise ValueError("symbolic size without a hint")
        return ("T", shape, stride, str(x.dtype), str(x.device))
    if isinstance(x, (list, tuple)):
        return tuple(_describe(v) for v in x)
    if isinstance(x, torch.SymInt):
        v = size_hint(x)
        if v is None:
            raise ValueError("symbolic size without a hint")
        return v
    return repr(x)


def _signature(node: fx.Node) -> tuple | None:
    try:
        target, args, kwargs = called_op(node)
        return (str(target), _describe(list(args)),
                tuple(sorted((k, _describe(v)) for k, v in kwargs.items())))
    except ValueError:
        return None


def _materialize(x: Any):
    """Real tensors (random values) for the fake ones in ``x``; SymInts to their hints."""
    if isinstance(x, fx.Node):
        x = x.meta.get("val")
    if isinstance(x, torch.Tensor):
        shape = [size_hint(d) for d in x.shape]
        stride = [size_hint(d) for d in x.stride()]
        out = torch.empty_strided(shape, stride, dtype=x.dtype, device=x.device)
        if out.is_floating_point():
            out.normal_()
        else:
            out.zero_()
        return out
    if isinstance(x, (list, tuple)):
        return type(x)(_materialize(v) for v in x)
    if isinstance(x, torch.SymInt):
        return size_hint(x)
    return x


def _time_node(node: fx.Node, repeat: int) -> float | None:
    """Median milliseconds of running ``node``'s op on real inputs, or ``None``."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    device = _some_tensor(node).device
    target, args, kwargs = called_op(node)
    try:
        with unset_fake_temporarily(), torch.no_grad(), torch.cuda.device(device):
            args = _materialize(list(args))
            kwargs = {k: _materialize(v) for k, v in kwargs.items()}

            def run() -> None:  # back to back, as in a training step
                for _ in range(repeat):
                    target(*args, **kwargs)

            return time_ms(run, 3) / repeat
    except Exception as err:  # noqa: BLE001 - any failure means: estimate instead
        log.debug("offload: could not time %s (%s); using the estimate", node.format_node(), err)
        return None
