"""Analyze: list the activations the forward graph saves for backward, and which of them
may be offloaded, each refusal with a reason that can be logged.

A candidate is a tensor output of the partitioned forward graph past its first
``num_fwd_outputs`` (the model's own outputs): exactly what autograd saves. It is
*eligible* when it is a floating-point activation on an allowed device, computed in
the graph (not a parameter, buffer or input, nor a view of one), not sharing storage
with a model output or another saved value, not overlapping (expanded), not read
through ``as_strided`` in backward, and at least ``min_offload_bytes`` large.

A saved view of an activation is eligible: its elements are copied, and the reloaded
tensor has the view's strides on a fresh storage.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.fx as fx

from .nodes import is_dense, is_overlapping, is_view_node, size_hint, tensor_nbytes, view_root
from .provenance import module_path, source_line

#: :attr:`Candidate.kind` of a value computed in the graph, and of a graph input
#: (parameter, buffer or model input) or a view of one.
ACTIVATION, INPUT = "activation", "input"


@dataclass(frozen=True)
class Candidate:
    name: str
    """The saved value's name in the forward graph (and its placeholder in backward)."""
    producer: str
    """The op that produced it, e.g. ``aten.mm.default``."""
    shape: tuple
    dtype: torch.dtype
    device: str
    nbytes: int
    """Bytes (size hint under dynamic shapes)."""
    eligible: bool
    reason: str
    """Why it is eligible or not, in words."""
    kind: str = ACTIVATION
    """``"activation"`` (computed in the graph) or ``"input"`` (a parameter, buffer or
    model input, or a view of one: it outlives the graph)."""
    module_path: str = ""
    """The module that computed it (``"blocks.0.attn.qkv"``; for an input, the module of
    its first reader in forward), ``""`` for the root module or when Dynamo recorded none."""
    source_line: str = ""
    """The user's source line that computed it (for an input, its first reader),
    ``"gpt.py:85 in forward"``, or ``""``."""


def _is_plain(val: torch.Tensor) -> bool:
    """A plain tensor under fake mode (not a wrapper subclass such as DTensor)."""
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    return isinstance(val, FakeTensor) and not is_traceable_wrapper_subclass(val)


_STORAGE_RELATIVE = {"as_strided", "as_strided_", "as_strided_scatter", "set_"}


def _read_by_storage(placeholder: fx.Node) -> bool:
    """True if backward reads ``placeholder`` relative to its storage, which a reloaded
    copy (a fresh storage at offset 0) does not reproduce."""
    todo = [placeholder]
    while todo:
        n = todo.pop()
        for u in n.users:
            name = getattr(getattr(u.target, "_schema", None), "name", "")
            if name.split("::")[-1] in _STORAGE_RELATIVE:
                return True
            if is_view_node(u):
                todo.append(u)
    return False


def _producer(node: fx.Node) -> str:
    if node.op == "call_function":
        return str(node.target)
    return node.op


def saved_values(fw_gm: fx.GraphModule, num_fwd_outputs: int) -> list[fx.Node]:
    """Forward nodes returned for backward, in output order (tensors and symbols)."""
    (outputs,) = fw_gm.graph.find_nodes(op="output")
    return [a for a in outputs.args[0][num_fwd_outputs:] if isinstance(a, fx.Node)]


def analyze_candidates(
    fw_gm: fx.GraphModule,
    bw_gm: fx.GraphModule,
    num_fwd_outputs: int,
    *,
    devices: tuple[str, ...],
    min_offload_bytes: int,
) -> list[Candidate]:
    """One :class:`Candidate` per tensor the forward saves for backward."""
    (outputs,) = fw_gm.graph.find_nodes(op="output")
    model_outputs = [a for a in outputs.args[0][:num_fwd_outputs] if isinstance(a, fx.Node)]
    saved = [n for n in saved_values(fw_gm, num_fwd_outputs)
             if isinstance(n.meta.get("val"), torch.Tensor)]
    # The partitioner names each backward placeholder after the forward value it
    # receives (it pairs them the same way); a saved value with no placeholder is unused.
    bw_inputs = {p.name: p for p in bw_gm.graph.find_nodes(op="placeholder")}
    roots_of_outputs = {view_root(n) for n in model_outputs}
    saved_roots: dict[fx.Node, list[fx.Node]] = {}
    for n in saved:
        saved_roots.setdefault(view_root(n), []).append(n)

    position = {n: i for i, n in enumerate(fw_gm.graph.nodes)}
    out = []
    for node in saved:
        val = node.meta["val"]
        nbytes = tensor_nbytes(val)
        eligible, reason = False, ""
        root = view_root(node)
        if node.op == "placeholder":
            reason = "graph input (parameter, buffer or user input): outlives the graph"
        elif node.op != "call_function":
            reason = f"{node.op} node: not an activation"
        elif root.op != "call_function":
            reason = f"view of graph input {root.name}: outlives the graph"
        elif not _is_plain(val):
            reason = f"tensor subclass {type(val).__name__}: not copied"
        elif not val.dtype.is_floating_point:
            reason = f"dtype {val.dtype} is not floating point"
        elif val.device.type not in devices:
            reason = f"device {val.device.type} not in devices {devices}"
        elif root in roots_of_outputs:
            reason = "model output or alias of one: the caller keeps it alive"
        elif len(saved_roots.get(root, ())) > 1:
            others = [n.name for n in saved_roots[root] if n is not node]
            reason = f"shares storage with saved {', '.join(others)}"
        elif is_overlapping(val) is not False:
            reason = "overlapping (expanded) or unknown strides: a copy would grow it"
        elif not is_dense(val) and not all(isinstance(st, int) for st in val.stride()):
            reason = "not dense, with symbolic strides: the reload could not restore them"
        elif node.name in bw_inputs and _read_by_storage(bw_inputs[node.name]):
            reason = "backward reads it through as_strided (storage-relative)"
        elif nbytes is None:
            reason = "size has no hint (data-dependent shape)"
        elif nbytes == 0:
            reason = "empty tensor"
        elif nbytes < min_offload_bytes:
            reason = f"{nbytes} bytes < min_offload_bytes={min_offload_bytes}"
        elif node.name not in bw_inputs:
            reason = "not used by backward"
        else:
            eligible, reason = True, "eligible"
        origin = _first_reader(node, position) if node.op == "placeholder" else _origin(node)
        out.append(Candidate(
            name=node.name,
            producer=_producer(node),
            shape=tuple(size_hint(s) for s in val.shape),
            dtype=val.dtype,
            device=str(val.device),
            nbytes=nbytes or 0,
            eligible=eligible,
            reason=reason,
            kind=ACTIVATION if root.op == "call_function" else INPUT,
            module_path=origin[0],
            source_line=origin[1],
        ))
    return out


def _origin(node: fx.Node) -> tuple[str, str]:
    return module_path(node), source_line(node)


def _first_reader(node: fx.Node, position: dict[fx.Node, int]) -> tuple[str, str]:
    """Where a graph input is first read in forward (a placeholder has no origin of its
    own): the first user, in graph order, that records a module path or a source line."""
    for user in sorted(node.users, key=position.__getitem__):
        origin = _origin(user)
        if any(origin):
            return origin
    return "", ""
