"""How Inductor lowers the transfer ops: the reload with an aligned result, the copy out
in the host copy's layout; and the order Inductor keeps them in.

Inductor lowers ``offload::h2d`` as a fallback (extern) kernel, like any custom op. It
also marks the result "not aligned": the op's input is a host tensor, a graph input
Inductor cannot assume 16-byte aligned (it only assumes so for GPU inputs), and a
fallback kernel with an unaligned input gets an unaligned output. The mark spreads
through every fallback kernel that reads the reload (an attention backward gets
unaligned gradients), and every Triton kernel that reads a marked buffer is compiled
without the alignment hint, so without vectorized loads. On an H100 the kernel
that concatenates the q, k and v gradients ran in 168 us instead of 130 us once the
attention backward read a reloaded tensor (``benchmarks/RESULTS.md``, session 6).

The mark is wrong for this op: ``h2d`` always returns a fresh allocation of its own
(``torch.empty_strided`` on the device, offset 0). :func:`install` wraps the op's
fallback lowering so that its result is not marked; the same for its token form
``h2d.slot`` (``runtime/graph_slots.py``), whose result is as fresh.

It also compiles each graph that carries transfer ops in the order the plan was made
for (:func:`compile_inner`). Inductor's scheduler reorders nodes to lower its own
estimate of the peak (``reorder_for_peak_memory``, on by default): a reload allocates
its result and frees nothing, so that pass moves every ``h2d`` down to just before its
``wait`` (its anchor bounds it from above in the graph, nothing bounds it from below),
and every ``d2h`` down to just before its ``release``. Each copy then starts when its
result is needed, and compute waits for all of it: on timm's ViT-B/16 on an H100, 36
stalls of about 0.5 ms each in one backward (each 27.7 MiB reload issued a few
microseconds before its use) against a plan that overlapped them
(``benchmarks/RESULTS.md``, session 12). The planner has already placed every copy,
release and recomputation and simulated the peak of that order; a graph without
transfer ops is compiled as Inductor would.

Fusion moves them too. After fusing, Inductor sorts its nodes by the earliest position
of anything each fused kernel holds and then orders them topologically, so a kernel
that fuses a node from before a copy's issue point with one from after it comes first,
with everything it needs, and every op it does not need is issued after all of that.
On HF Llama's decoder layer (one block at a time, an H100) the prefetch of the next
block's first reload, planned before the attention backward, was issued after it and
three more kernels: it landed 0.7 ms after the backward ended, a stall of the next
block every call (``benchmarks/RESULTS.md``, session 18). :func:`issue_early`, run after
fusion, moves each op that starts a copy (``d2h``, ``h2d``, ``prefetch_next`` and the
token forms) back up to the next extern kernel after what it depends on, as the plan
placed it; the ops that wait for a copy stay where Inductor put them.

Each ``d2h`` gets its input in the layout of its host copy, the one Inductor requires of
that forward output (:func:`host_strides`), and no kernel of Inductor's may read a host
copy (:func:`host_copies_untouched`): on a GPU such a kernel would read the host buffer
before the asynchronous copy filled it.

The generated code calls each transfer op's Python kernel without the dispatcher
(:func:`call_directly`, ``runtime.ops.direct``): on an H100 host that saved 3 to 4 us of
each op's host time, four ops per offloaded tensor per step (``benchmarks/RESULTS.md``,
session 39).

A backward with transfer ops keeps Inductor's buffer pool (``allow_buffer_reuse``) only
where its plan says so (:func:`plan_pool`): where the planner's replay of the pool finds it
holds no dead buffer at the step's peak (``planning/step_peak.py``). Inductor keeps a dead
buffer for a later one of its size wherever its own estimate of the graph's peak allows;
the backend's compiles weigh that against an estimate that sizes every buffer and leaves
out the host copies (``reuse_estimate.py``), which still misses what a kernel allocates
inside itself. Before that estimate, Inductor's own counted the offloaded tensors' host
copies as device memory and sized only the inputs, and on HF Llama the pool held six dead
176 MiB buffers through a layer's attention backward (session 36); until session 51 every
backward with transfer ops went without the pool. Without it the CUDA caching allocator
takes each freed buffer back for the next one of its size, and the host pays for it: a
plan that offloaded 26 tensors of ResNet-50 made 616 and 570 device allocations a forward
and a backward against 327 and 376 (session 47), and one plan's backward 856 against 424
with the pool (session 50). A forward with transfer ops always keeps the pool: its estimate
counts the graph's outputs and leaves out the host copies, so it sizes what the forward
holds on the device, as the planner's step-peak replay does.
"""

from __future__ import annotations

import functools
import hashlib
import logging
from typing import Any

import torch

from passes.nodes import is_transfer
from passes.provenance import value_label

from . import reuse_estimate
from .gc_scope import fewer_collections
from .runtime import chain, graph_slots, ops

log = logging.getLogger("offload_compiler")

_MARK = "_offload_aligned_result"
#: Ops that start a copy (:func:`issue_early`).
_ISSUE_OPS = (ops.D2H, ops.H2D, graph_slots.D2H, graph_slots.H2D, chain.PREFETCH_NEXT)


def install() -> bool:
    """Lower ``offload::h2d`` and ``offload::h2d.slot`` as Inductor's fallback would, their
    results not marked unaligned, and ``offload::d2h`` and ``offload::d2h.slot`` with their
    input in the layout of the host copy (:func:`host_strides`). Idempotent; ``False``
    (and a debug log) if this torch has no such hook, in which case Inductor's own
    implicit fallbacks stay in place."""
    try:
        from torch._inductor import ir
        from torch._inductor import lowering as L
        from torch._inductor.virtualized import V
        from torch._library.utils import get_layout_constraint_tag
    except ImportError as err:  # pragma: no cover - torch without these internals
        log.debug("offload: transfer op lowerings not installed (%s)", err)
        return False
    for op, wrap in ((ops.H2D, _aligned), (graph_slots.H2D, _aligned),
                     (ops.D2H, _host_layout), (graph_slots.D2H, _host_layout)):
        current = L.lowerings.get(op)
        if getattr(current, _MARK, False):
            continue
        if current is None:
            # What Inductor's implicit fallback for a custom op does (GraphLowering.call_function).
            constraint = L.tag_to_layout_constraint(get_layout_constraint_tag(op, with_default=True))
            L.make_fallback(op, layout_constraint=constraint, warn=False)
            current = L.lowerings[op]
        lowered = wrap(current, ir, V, token=op is graph_slots.D2H)
        setattr(lowered, _MARK, True)
        L.lowerings[op] = lowered
    return True


def _aligned(current, ir, V, token: bool):
    def lower_h2d(*args: Any, **kwargs: Any):
        result = current(*args, **kwargs)
        V.graph.unaligned_buffers.discard(result.get_name())
        return result
    return lower_h2d


def _host_layout(current, ir, V, token: bool):
    def lower_d2h(src, keep_strides, *rest: Any):
        node = V.graph.current_node
        prefer = getattr(V.graph, "nodes_prefer_channels_last", None)
        if keep_strides:
            strides = host_strides(node, None if token else prefer)
            if isinstance(src, ir.TensorBox):
                src.realize()  # one buffer, the one other readers of the value read too
            if not _laid_out(src, strides, ir, V):
                src = ir.ExternKernel.require_exact_strides(src, strides)
        elif prefer is not None:  # packed contiguously, as the graph says
            prefer.discard(node)
        return current(src, keep_strides, *rest)
    return lower_d2h


def _laid_out(src, strides, ir, V) -> bool:
    """Whether ``src`` (Inductor's IR) is fixed in ``strides`` already, up to the strides of
    dimensions of size 1 (which Inductor may leave unlike the graph's: requiring them made
    it write a layer norm's statistics twice)."""
    try:
        if isinstance(src.get_layout(), ir.FlexibleLayout):
            return False  # to be fixed in them, at no cost
        got, size = src.get_stride(), src.get_size()
    except (AttributeError, NotImplementedError):
        return False
    known = V.graph.sizevars.statically_known_equals
    return len(got) == len(strides) and all(
        known(n, 1) or known(a, b) for a, b, n in zip(got, strides, size))


def host_strides(node, prefer) -> list:
    """The strides of ``d2h`` node ``node``'s input as Inductor hands it over, for a dense
    value (copied with its strides): those Inductor will require of the host copy, a
    forward output saved for backward. That is the graph's strides, or channels-last for
    a 4-d value in ``prefer`` (Inductor's ``nodes_prefer_channels_last``: a convolution
    reads it or what it feeds; the token form's result is no such output: ``None``).

    The host copy has its input's strides, and Inductor requires its own choice of them
    of a forward output; where the two differed it added a kernel that copies the host
    copy into the strides it chose, run on the host, which on a GPU reads the host
    buffer before the asynchronous device-to-host copy has filled it. Inductor also
    hands the input of an op a pass inserted in whatever layout it picked for the value:
    a slice of a buffer it had laid out otherwise arrived with gaps where the plan had a
    dense value, and the copy refused it. HF Mamba's scan on the CPU had both
    (``benchmarks/RESULTS.md``, session 46). With the input's strides fixed to those of
    the output, a value Inductor computes in a layout of its choosing is written in this
    one; one it made as a view of a buffer laid out otherwise is copied on the device
    first, as it would be were it saved without offloading."""
    val = node.args[0].meta["val"]
    if prefer is not None and node in prefer and val.dim() == 4:
        return list(torch._prims_common.make_channels_last_strides_for(val.shape))
    return list(val.stride())


def compile_inner(gm, example_inputs, **kwargs: Any):
    """Inductor's ``compile_fx_inner`` for one graph of the backend's (forward or
    backward, compiled inside ``compile_fx``): a graph with transfer ops is compiled
    without Inductor's peak-memory reordering, so its copies are issued where the plan
    put them, and a backward with them with its buffer pool only where the plan keeps it
    (:func:`plan_pool`; the module docstring); any other graph as Inductor would. Each buffer pool is weighed against an
    estimate of the graph's peak that counts its outputs and not its host copies
    (``reuse_estimate.py``)."""
    from torch._inductor import config
    from torch._inductor.compile_fx import compile_fx_inner

    patches: dict[str, Any] = {}
    transfers = [n for n in gm.graph.nodes if is_transfer(n)]
    if transfers:
        patches["reorder_for_peak_memory"] = False
        patches["allow_buffer_reuse"] = not kwargs.get("is_backward", False) or all(
            n.meta.get(_POOL, False) for n in transfers)
        if hasattr(config, "_post_fusion_custom_pass"):
            patches["_post_fusion_custom_pass"] = _transfer_pass(config._post_fusion_custom_pass)
    reuse_estimate.install()
    # The backward compiles at its first call, outside the backend's compile scope.
    with fewer_collections(), config.patch(patches), reuse_estimate.counting():
        return compile_fx_inner(gm, example_inputs, **kwargs)


_POOL = "offload_buffer_pool"  # on a backward's transfer ops: the plan keeps Inductor's buffer pool


def plan_pool(bw_gm, pool_bytes: int | None) -> None:
    """Tell :func:`compile_inner` whether ``bw_gm`` (a backward with transfer ops) keeps
    Inductor's buffer pool: where its plan's replay found the pool adds nothing to the
    step peak (``pool_bytes`` 0; ``None``: not simulated, no pool)."""
    for n in bw_gm.graph.nodes:
        if is_transfer(n):
            n.meta[_POOL] = pool_bytes == 0


def _transfer_pass(previous):
    """:func:`issue_early` and :func:`call_directly` as Inductor's post-fusion pass, after
    ``previous`` (a pass already installed) if any."""
    if _TransferPass is None:  # a torch without keyed scheduler passes (2.11)
        return _PlainTransferPass(previous)
    return _TransferPass(previous)


@functools.cache
def _source_hash() -> str:
    with open(__file__, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class _PlainTransferPass:
    """:func:`issue_early` and :func:`call_directly` after ``previous``, where torch has no
    ``CustomSchedulerPass`` (torch 2.11). Inductor's FX graph cache pickles its config into
    the cache key: a function made per compile could not be pickled (torch 2.11 on an
    H200 logged "Failed to pickle cache key" with a traceback for every graph with transfer
    ops, and cached none; ``benchmarks/RESULTS.md``, session 42). An object of a class
    defined here pickles, with ``version`` (this file's hash): a change to the pass changes
    the key."""

    def __init__(self, previous=None) -> None:
        self.previous = previous
        self.version = _source_hash()

    def __call__(self, nodes: list) -> list:
        return after_fusion(self.previous, nodes)


def after_fusion(previous, nodes: list) -> list:
    """The backend's post-fusion work on Inductor's scheduler nodes, after ``previous`` (a
    pass already installed) if any: :func:`host_copies_untouched`, :func:`issue_early`,
    :func:`call_directly`."""
    nodes = previous(nodes) if previous is not None else nodes
    return call_directly(issue_early(host_copies_untouched(nodes)))


def host_copies_untouched(nodes: list) -> list:
    """``nodes`` (Inductor's scheduler nodes, fused), checked: no kernel but the backend's
    own ops reads a ``d2h``'s host copy. One that did would run on the host, and on a
    GPU read the host buffer before the asynchronous copy has filled it, so the compile
    stops with an error naming the value instead (:func:`host_strides` says how Inductor
    came to add such a kernel, and why it no longer does)."""
    host: dict[str, str] = {}  # buffer name -> the FX nodes its d2h came from
    for snode in nodes:
        for base in snode.get_nodes():
            kernel = getattr(base, "node", None)
            op = getattr(kernel, "op_overload", None)
            read = sorted(d.name for d in base.read_writes.reads if d.name in host)
            if op is ops.D2H:
                made = _copied_value(kernel)
            elif read and type(kernel).__name__ == "MultiOutput":  # the d2h's result
                made = host[read[0]]
            else:
                if read and getattr(op, "namespace", None) != ops.NAMESPACE:
                    raise RuntimeError(
                        f"offload: Inductor laid out the host copy {read[0]} (of {host[read[0]]}) anew in a "
                        f"kernel of its own ({base.get_name()}), which would read it before the copy from the "
                        f"device ends; stopping rather than risk wrong gradients (please report this)")
                continue
            host.update((name, made) for name in base.get_buffer_names())
    return nodes


def _copied_value(kernel) -> str:
    """The value a ``d2h`` kernel copies, in the user's terms (module, source line)."""
    for origin in getattr(kernel, "origins", ()):
        if origin.target in (ops.D2H, graph_slots.D2H):
            return value_label(origin.args[0])
    return "a saved value"


def call_directly(nodes: list) -> list:
    """``nodes`` (Inductor's scheduler nodes), each of the backend's ops among them to be
    called in the generated code without the dispatcher: the name it is called by (the
    fallback kernel's ``python_kernel_name``, ``torch.ops.offload.d2h.default``) with
    ``ops.DIRECT`` after it (``ops.direct``)."""
    for snode in nodes:
        kernel = getattr(snode, "node", None)
        op = getattr(kernel, "op_overload", None)
        name = getattr(kernel, "python_kernel_name", None)
        if (op is not None and hasattr(op, ops.DIRECT) and isinstance(name, str)
                and name.startswith(f"torch.ops.{ops.NAMESPACE}.")):
            kernel.python_kernel_name = f"{name}.{ops.DIRECT}"
    return nodes


try:
    from torch._inductor.custom_graph_pass import CustomSchedulerPass, get_hash_for_files
except ImportError:  # pragma: no cover
    _TransferPass = None
else:
    class _TransferPass(CustomSchedulerPass):
        """:func:`issue_early` and :func:`call_directly` after ``previous``. Defined here,
        not per compile, so that it pickles (Inductor's FX graph cache pickles the
        config) and its ``uuid`` (this file's hash, and the previous pass's) keys the
        cache: a plain function makes Inductor refuse to cache the graph."""

        def __init__(self, previous=None) -> None:
            self.previous = previous

        def __call__(self, nodes: list) -> list:
            return after_fusion(self.previous, nodes)

        def uuid(self) -> Any:
            before = self.previous.uuid() if isinstance(self.previous, CustomSchedulerPass) else None
            return (get_hash_for_files((__file__,)), before)


def _issues_copy(snode) -> bool:
    return getattr(getattr(snode, "node", None), "op_overload", None) in _ISSUE_OPS


def issue_early(nodes: list) -> list:
    """Inductor's scheduler nodes (after fusion) with each op that starts a copy moved up
    to where the plan put it: after the last node it depends on and the generated kernels
    right after that, before the next extern kernel (the planner places a copy before
    the next matmul or attention; stopping at generated kernels keeps the C++ backend's
    runs of them in one function). Never later than Inductor put it; everything else in
    its order. Every dependency of a moved op stays before it and every node that
    depends on it after it (it only moves up), so the order is still topological."""
    if not any(_issues_copy(n) for n in nodes):
        return nodes
    rest = [n for n in nodes if not _issues_copy(n)]
    # buffer name -> (the node of ``rest`` it comes after, whether a moved op made it)
    where = {name: (i, False) for i, n in enumerate(rest) for name in n.get_buffer_names()}
    after: dict[int, list] = {}
    before = 0  # nodes of ``rest`` Inductor put before the current one
    for n in nodes:
        if not _issues_copy(n):
            before += 1
            continue
        at, moved = max((where[d.name] for d in n.unmet_dependencies if d.name in where),
                        default=(-1, False))
        if not moved:  # past the generated kernels after what it depends on
            while at + 1 < before and not rest[at + 1].is_extern():
                at += 1
        after.setdefault(at, []).append(n)  # after a moved op it depends on, if any
        where.update((name, (at, True)) for name in n.get_buffer_names())
    out = list(after.get(-1, []))
    for i, n in enumerate(rest):
        out.append(n)
        out.extend(after.get(i, []))
    return out
