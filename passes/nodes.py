"""What an FX node is: one home for the facts every pass and the planner ask of a node.

- Storage: views and ``getitem`` (:func:`is_view_node`, :func:`is_view_or_getitem`,
  :func:`view_root`, :func:`alias_closure`, :func:`aliases`), sizes from size hints
  (:func:`size_hint`, :func:`numel_hint`, :func:`tensor_nbytes`, :func:`tensor_bytes`)
  or, within :func:`sizes_at`, at the sizes a plan is made for, layout
  (:func:`is_overlapping`, :func:`is_dense`).
- Kernels: the op a node runs through the partitioner's RNG wrappers (:func:`called_op`,
  :func:`op_argument`), whether it is an extern kernel of its own (:func:`is_extern`),
  a fused attention and its direction (:func:`attention_direction`), a transfer op of
  this project (:func:`is_transfer`), random (:func:`is_random`).
Where a node came from, in the user's terms (its module and source line), is
:mod:`passes.provenance`; whether and where Inductor writes a value to memory,
:mod:`passes.materialization`.

Transfer ops are recognised by their namespace, ``torch.ops.offload`` (registered by
``offload_compiler.runtime``), so this module needs nothing from ``offload_compiler``.
"""

from __future__ import annotations

import contextlib
import contextvars
import operator
from typing import Any, Iterator, Mapping

import sympy
import torch
import torch.fx as fx
from torch.utils.flop_counter import flop_registry

from .transfer_meta import transfer_meta

#: Namespace of the transfer ops (``offload::d2h``, ``release``, ``h2d``, ``wait``).
TRANSFER_NAMESPACE = "offload"


def is_transfer(node: fx.Node) -> bool:
    """A transfer op of this project (``torch.ops.offload.*``)."""
    return node.op == "call_function" and getattr(node.target, "namespace", None) == TRANSFER_NAMESPACE


def transfer_op(name: str) -> Any:
    """The overload ``torch.ops.offload.<name>.default`` (``"d2h"``, ``"release"``,
    ``"h2d"``, ``"wait"``); the runtime must have registered it (importing
    ``offload_compiler`` does)."""
    return getattr(getattr(torch.ops, TRANSFER_NAMESPACE), name).default


def _returns_alias(target: object) -> bool:
    known = _ALIAS_BY_TARGET.get(target)
    if known is None:
        schema = getattr(target, "_schema", None)
        known = schema is not None and any(r.alias_info is not None for r in schema.returns)
        _ALIAS_BY_TARGET[target] = known
    return known


#: ``_returns_alias`` by op. Reading an op's schema builds its return values' Python
#: objects on each call: 0.5 s of planning HF Llama on an H100 host went there
#: (``benchmarks/RESULTS.md``, session 22), asked of every node many times.
_ALIAS_BY_TARGET: dict[Any, bool] = {}


def is_view_node(node: fx.Node) -> bool:
    """True if ``node``'s result aliases an input: a view op, or an element of the
    list a view op returns (``split``, ``unbind``, ``chunk``)."""
    if node.op != "call_function":
        return False
    if node.target is operator.getitem:
        parent = node.args[0]
        return isinstance(parent, fx.Node) and is_view_node(parent)
    return _returns_alias(node.target)


def is_view_or_getitem(node: fx.Node) -> bool:
    """A view or a ``getitem``: no kernel of its own; it reads (part of) its first
    input."""
    return is_view_node(node) or (node.op == "call_function" and node.target is operator.getitem)


def view_root(node: fx.Node) -> fx.Node:
    """Follow views back to the node that owns the storage."""
    while is_view_node(node) and node.args and isinstance(node.args[0], fx.Node):
        node = node.args[0]
    return node


def alias_closure(node: fx.Node) -> list[fx.Node]:
    """Every node sharing ``node``'s storage: its root and all views of the root."""
    out, todo = [], [view_root(node)]
    while todo:
        n = todo.pop()
        out.append(n)
        todo.extend(u for u in n.users if is_view_node(u) and u.args and u.args[0] is n)
    return out


class _SizesAt:
    """Values of size symbols in force within :func:`sizes_at`, and what symbolic
    sizes came to under them (the planner asks for the same sizes again and again)."""

    def __init__(self, values: Mapping[sympy.Symbol, int]) -> None:
        self.values = {sym: sympy.Integer(int(v)) for sym, v in values.items()}
        self.memo: dict[sympy.Expr, int | None] = {}

    def evaluate(self, x: torch.SymInt) -> int | None:
        expr = x.node.expr
        if expr not in self.memo:
            value = expr.xreplace(self.values)
            if not value.is_number:  # a symbol not given keeps its hint
                value = value.xreplace(_backed_hints(x.node.shape_env))
            self.memo[expr] = int(value) if value.is_number else None  # None: unbacked
        return self.memo[expr]


def _backed_hints(shape_env: Any) -> Mapping[sympy.Symbol, sympy.Integer]:
    hints = getattr(shape_env, "backed_var_to_val", None)  # torch >= 2.13
    return hints if hints is not None else shape_env.var_to_val


_SIZES_AT: contextvars.ContextVar[_SizesAt | None] = contextvars.ContextVar(
    "passes_nodes_sizes_at", default=None)


@contextlib.contextmanager
def sizes_at(values: Mapping[sympy.Symbol, int]) -> Iterator[None]:
    """Within this scope, :func:`size_hint` (hence every size the passes and the planner
    read: :func:`numel_hint`, :func:`tensor_nbytes`, FLOP counts) evaluates a symbolic
    size with ``values`` for its symbols (Dynamo's ``s0``, ``s1``, ...) instead of the
    hints the graph was traced with; a symbol not in ``values`` keeps its hint. This is
    how a graph with dynamic sizes is planned for sizes other than the ones it was
    first compiled at. Nothing is guarded on and no graph changes."""
    token = _SIZES_AT.set(_SizesAt(values))
    try:
        yield
    finally:
        _SIZES_AT.reset(token)


def planned_sizes() -> dict[str, int]:
    """The symbol values :func:`sizes_at` put in force, by symbol name (``{"s0": 256}``);
    empty outside it."""
    at = _SIZES_AT.get()
    return {} if at is None else {str(sym): int(v) for sym, v in at.values.items()}


def size_hint(x: object) -> int | None:
    """The value of a size: an int as is; a ``SymInt`` at the sizes of :func:`sizes_at`
    when in force, else at its hint; ``None`` for a size with no hint (data-dependent)."""
    if isinstance(x, int):
        return x
    if isinstance(x, torch.SymInt):
        at = _SIZES_AT.get()
        if at is not None:
            return at.evaluate(x)
        hint = x.node.hint
        if hint is not None:
            return int(hint)
        try:
            return int(x.node.shape_env.size_hint(x.node.expr))
        except Exception:  # unbacked symbol: no hint
            return None
    return None


def dtype_of(node: object) -> torch.dtype | None:
    """The dtype of ``node``'s value (``None`` for a non-tensor value or a non-node)."""
    return getattr(getattr(node, "meta", {}).get("val"), "dtype", None)


def numel_hint(val: torch.Tensor) -> int | None:
    """Elements of ``val`` from size hints (never a guard on a dynamic size); ``None``
    when a size has no hint."""
    numel = 1
    for s in val.shape:
        h = size_hint(s)
        if h is None:
            return None
        numel *= h
    return numel


def tensor_nbytes(val: torch.Tensor) -> int | None:
    numel = numel_hint(val)
    return None if numel is None else numel * val.element_size()


def is_overlapping(val: torch.Tensor) -> bool | None:
    """Whether two elements share memory (an expanded tensor); ``None`` if unknown."""
    dims = []
    for size, stride in zip(val.shape, val.stride()):
        size, stride = size_hint(size), size_hint(stride)
        if size is None or stride is None:
            return None
        if size > 1:
            dims.append((stride, size))
    dims.sort()
    reach = 1  # elements spanned by the dimensions seen so far
    for stride, size in dims:
        if stride < reach:
            return True
        reach = stride * (size - 1) + reach
    return False


def is_dense(val: torch.Tensor) -> bool:
    """Non-overlapping and dense (ignoring storage offset): its strides fit a buffer of
    exactly ``numel`` elements."""
    if is_overlapping(val) is not False:
        return False
    numel, reach = 1, 1
    for size, stride in zip(val.shape, val.stride()):
        size, stride = size_hint(size), size_hint(stride)
        numel *= size
        if size > 1:
            reach += stride * (size - 1)
    return reach == numel or numel == 0


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
    if node.op != "call_function":
        return False
    target = node.target
    if target in _RNG_WRAPPERS:
        return _is_extern(node)
    known = _EXTERN_BY_TARGET.get(target)
    if known is None:
        known = _EXTERN_BY_TARGET[target] = _is_extern(node)
    return known


#: ``is_extern`` by op: it depends on the op alone, except for the RNG wrappers (the op
#: they wrap is an argument). The planner asks it of every node many times.
_EXTERN_BY_TARGET: dict[Any, bool] = {}


def _is_extern(node: fx.Node) -> bool:
    if is_transfer(node) or is_view_or_getitem(node):
        return False
    packet = getattr(called_op(node)[0], "overloadpacket", None)
    return packet is not None and (packet in flop_registry or packet.__name__ in CPU_ATTENTION_OPS)


def node_values(x):
    """The values (``meta["val"]``) of the nodes in ``x``, keeping its list or tuple
    structure; anything else unchanged."""
    if isinstance(x, fx.Node):
        return x.meta.get("val")
    if isinstance(x, (list, tuple)):
        return type(x)(node_values(v) for v in x)
    return x


def tensor_bytes(x) -> int:
    if isinstance(x, torch.Tensor):
        return tensor_nbytes(x) or 0
    if isinstance(x, (list, tuple)):
        return sum(tensor_bytes(v) for v in x)
    return 0


def attention_direction(node: fx.Node) -> str | None:
    """``"forward"`` or ``"backward"`` for a fused scaled-dot-product attention op."""
    packet = getattr(called_op(node)[0], "overloadpacket", None)
    name = getattr(packet, "__name__", "")
    if not name.startswith("_scaled_dot_product_") or "attention" not in name:
        return None
    return "backward" if name.endswith("_backward") else "forward"


def convolution_direction(node: fx.Node) -> str | None:
    """``"forward"`` or ``"backward"`` for a convolution op (``convolution``,
    ``convolution_backward``)."""
    packet = getattr(called_op(node)[0], "overloadpacket", None)
    return {"convolution": "forward", "convolution_backward": "backward"}.get(getattr(packet, "__name__", ""))


def op_argument(node: fx.Node, name: str):
    """The value ``node`` passes for its op's argument ``name`` (schema default if absent)."""
    target, args, kwargs = called_op(node)
    schema = getattr(target, "_schema", None)
    for i, arg in enumerate(schema.arguments if schema is not None else ()):
        if arg.name == name:
            if i < len(args):
                return args[i]
            return kwargs.get(name, arg.default_value)
    return None


def is_free(node: fx.Node) -> bool:
    """No kernel of its own: not an op, or a transfer, view or ``getitem``."""
    return node.op != "call_function" or is_transfer(node) or is_view_or_getitem(node)


def aliases(node: fx.Node) -> list[fx.Node]:
    """``node`` and what reads its storage: its views and ``getitem``s, recursively."""
    out, todo = [], [node]
    while todo:
        n = todo.pop()
        out.append(n)
        todo.extend(u for u in n.users if is_view_or_getitem(u) and u.args and u.args[0] is n)
    return out


def is_random(node: fx.Node) -> bool:
    """Draws random numbers. Attention ops are tagged random for their dropout; with
    ``dropout_p == 0`` they are deterministic."""
    tags = getattr(node.target, "tags", ())
    if torch.Tag.nondeterministic_seeded not in tags:
        return False
    value = op_argument(node, "dropout_p")  # None: the op has no such argument
    return not (isinstance(value, (int, float)) and value == 0)


def is_tensor_op(node: fx.Node) -> bool:
    """A computed tensor: not an input, not a transfer op (what an anchor may be)."""
    return (node.op == "call_function" and transfer_meta(node) is None
            and not is_transfer(node)
            and isinstance(node.meta.get("val"), torch.Tensor))
