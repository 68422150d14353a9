"""Liveness: when a tensor of a partitioned graph is really read for the last time, and
which tensors Inductor writes over in place. What the simulator's memory is counted from.

Inductor fuses ops: a value it keeps in registers (a pointwise result no extern kernel
or output reads, ``costs.is_materialized``) is computed inside each kernel that reads
it. So a tensor read by such a value is read by the kernel that writes the value's
first materialized descendant, not by the value's own op: a saved logits tensor read
by a chain of casts, exponentials and subtractions is still held while the kernel at
the chain's end writes the logits' gradient. :class:`Liveness` finds that kernel for
every op (its *kernel end*): the op itself when it is written to memory or a reduction
(Inductor writes a reduction's result to a buffer of its own), else the latest kernel
end among its readers. A pointwise value is also written when several ops read it and
inlining it would read too many buffers (:func:`_realized_on_reuse`: a residual
stream's adds).

Inductor fuses pointwise kernels that only read a buffer in common into one, run at the
first one's place (:meth:`Liveness._fused_early`): their values are written there.

Inductor rewrites ``add(mm(a, b), c)`` into ``addmm(c, a, b)`` at the add: the matmul
reads ``a`` and ``b`` there (``passes.keep_matmuls_early``, which prevents it where that
holds large inputs, says more).

Inductor also writes a kernel's output into an input buffer the kernel reads for the
last time, when both have one dtype and sizes within 5% (``config.inplace_buffers``;
``Scheduler.decide_inplace_update``): the gradient of the logits takes the logits'
memory, and the two never coexist. Graph inputs are only reused in backward, where
AOTAutograd donates the saved tensors; a value the graph outputs is never reused.
"""

from __future__ import annotations

import torch
import torch.fx as fx

from passes.materialization import is_materialized
from passes.nodes import (aliases, attention_direction, dtype_of, is_extern, is_view_or_getitem,
                          numel_hint, op_argument, tensor_bytes)
from passes.keep_matmuls_early import addmm_target

from .simulator import Transient

#: Inductor's limits on fusing kernels that only read a buffer in common: the readers
#: of one buffer after each that it tries (``config.max_fusion_buffer_group_pairwise_attempts``),
#: how far apart in its order of kernels two may be (``Scheduler.are_long_distant_nodes``)
#: and how many one fused kernel may hold (``config.max_fusion_size``).
FUSION_ATTEMPTS = 64
FUSION_DISTANCE = 64
FUSION_SIZE = 64
#: When Inductor writes out a pointwise value no extern kernel reads (``config``:
#: ``realize_reads_threshold``, ``realize_opcount_threshold``, ``realize_acc_reads_threshold``).
REUSE_READS = 4
REUSE_OPS = 30
ACCUMULATED_READS = 8


def _numel(val) -> int:
    return (numel_hint(val) or 0) if isinstance(val, torch.Tensor) else 0


def _reduces(node: fx.Node) -> bool:
    """An op with fewer output elements than its largest input: a reduction (or an
    indexing op), which ends a fusion."""
    out = _numel(node.meta.get("val"))
    return any(_numel(a.meta.get("val")) > out for a in node.all_input_nodes)


def _realized_on_reuse(nodes: list[fx.Node]) -> set[fx.Node]:
    """Pointwise values of ``nodes`` Inductor writes to memory though only its own
    kernels read them (``GraphLowering.run_node``): one read by more than one op whose
    inlined computation reads more than ``REUSE_READS`` buffers or runs more than
    ``REUSE_OPS`` ops (``StorageBox.should_realize_on_reuse``), and any whose inlined
    computation reads more than ``ACCUMULATED_READS`` (``has_exceeded_max_reads``). A
    residual stream's adds are such values: read by the next norm's statistics, its
    normalisation and the next add, each inlines the adds before it until one reads five
    buffers; the model that took none of them as written held every projection they read
    to the forward's end (ViT-B/16, ``benchmarks/RESULTS.md``, session 28)."""
    realized: set[fx.Node] = set()
    reads: dict[fx.Node, frozenset] = {}
    ops: dict[fx.Node, int] = {}
    for n in nodes:
        if is_view_or_getitem(n):
            base = n.all_input_nodes[:1]
            reads[n] = reads.get(base[0], frozenset(base)) if base else frozenset()
            ops[n] = ops.get(base[0], 0) if base else 0
            continue
        if is_extern(n) or is_materialized(n) or _reduces(n):
            continue  # a buffer of its own: its readers read it, not what it reads
        buffers, count = set(), 1
        for a in n.all_input_nodes:
            if a in reads:
                buffers |= reads[a]
                count += ops[a]
            elif isinstance(a.meta.get("val"), torch.Tensor):
                buffers.add(a)
        if ((len(n.users) > 1 and (len(buffers) > REUSE_READS or count > REUSE_OPS))
                or len(buffers) > ACCUMULATED_READS):
            realized.add(n)
            continue
        reads[n], ops[n] = frozenset(buffers), min(count, 1 << 20)
    return realized


class Liveness:
    """Kernel ends and in-place reuse of one graph's ``nodes`` (its ``call_function``
    nodes in order), positions counted from ``offset``. ``donated``: graph inputs whose
    memory Inductor may reuse (backward: the saved tensors)."""

    def __init__(self, nodes: list[fx.Node], offset: int = 0, donated: bool = False) -> None:
        self.nodes = nodes
        self.pos = {n: offset + i for i, n in enumerate(nodes)}
        self.end: dict[fx.Node, int] = {}
        self.deferred: dict[fx.Node, int] = {}
        """A matmul Inductor runs later, as an ``addmm`` at its add: -> that position."""
        for node in nodes:
            add = addmm_target(node)
            if add is not None and add in self.pos:
                self.deferred[node] = self.pos[add]
        self.realized = _realized_on_reuse(nodes)
        """Pointwise values Inductor writes out though no extern kernel reads them."""
        for node in reversed(nodes):
            at = self.pos[node]
            if node in self.deferred:
                self.end[node] = self.deferred[node]
            elif not is_view_or_getitem(node) and (self.written(node) or _reduces(node)):
                self.end[node] = at
            else:
                self.end[node] = max([at] + [self.end[u] for u in node.users if u in self.end])
        self.early: dict[fx.Node, int] = self._fused_early()
        """A value Inductor writes before its own position -> where (:meth:`_fused_early`)."""
        self.inplace: dict[int, fx.Node] = {}
        """Op position -> the input buffer its output is written over."""
        for node in nodes:
            if (is_view_or_getitem(node) or is_extern(node) or not self.written(node)
                    or node in self.early):
                continue
            reused = self._reusable_input(node, donated)
            if reused is not None:
                self.inplace[self.pos[node]] = reused

    def written(self, node: fx.Node) -> bool:
        """Whether Inductor writes ``node`` to memory: read by an extern kernel or the
        output (``passes.materialization.is_materialized``), or realized on reuse."""
        return node in self.realized or is_materialized(node)

    def written_at(self, node: fx.Node) -> int:
        """Where Inductor writes ``node``'s buffer: its position, or earlier where its
        kernel is fused with an earlier one (:attr:`early`)."""
        return self.early.get(node, self.pos[node])

    def _fused_early(self) -> dict[fx.Node, int]:
        """Values Inductor computes before their position in the graph, and where.

        Inductor fuses pointwise kernels that read a buffer in common and iterate over
        as many elements, where neither depends on the other (``Scheduler.can_fuse``,
        within the ``FUSION_*`` limits), and runs the fused kernel at its earliest
        member's place, after every op its members depend on
        (``topological_sort_schedule`` pulls those forward). So a later member, and
        what it depends on past that place, is written there. On an H100, HF Llama's
        backward with its MLP recomputed: the recomputed ``silu(gate) * up`` and the
        gradients of gate and up ran as one kernel after the matmul of the output's
        gradient, six buffers of the MLP's width live at once where the graph's order
        has five (``benchmarks/RESULTS.md``, session 28)."""
        index = {n: i for i, n in enumerate(self.nodes)}
        above: dict[fx.Node, int] = {}  # ancestors among ``nodes``, as a bit mask
        for n in self.nodes:
            bits = 0
            for a in n.all_input_nodes:
                if a in index:
                    bits |= above[a] | (1 << index[a])
            above[n] = bits
        kernels = [n for n in self.nodes if self.end.get(n) == self.pos[n] and n not in self.deferred
                   and not is_view_or_getitem(n) and not is_extern(n) and not _reduces(n)
                   and self.written(n)]
        readers: dict[fx.Node, list[fx.Node]] = {}
        for n in kernels:
            for buf in self._kernel_inputs(n):
                readers.setdefault(buf, []).append(n)
        # Inductor's order of its kernels: what it measures distance in.
        order = {n: k for k, n in enumerate(n for n in self.nodes if self.end.get(n) == self.pos[n])}
        group = {n: n for n in kernels}  # union-find: each kernel's fused group
        members = {n: 1 << index[n] for n in kernels}
        needs = {n: above[n] for n in kernels}  # what a group depends on
        span = {n: (order[n], order[n], 1) for n in kernels}  # first, last (kernel order), size

        def root(n: fx.Node) -> fx.Node:
            while group[n] is not n:
                group[n] = group[group[n]]
                n = group[n]
            return n

        for reading in readers.values():
            for i, a in enumerate(reading):
                for b in reading[i + 1:i + 1 + FUSION_ATTEMPTS]:
                    ra, rb = root(a), root(b)
                    if (ra is rb or _numel(a.meta.get("val")) != _numel(b.meta.get("val"))
                            or needs[ra] & members[rb] or needs[rb] & members[ra]):
                        continue
                    (lo_a, hi_a, n_a), (lo_b, hi_b, n_b) = span[ra], span[rb]
                    if max(abs(lo_a - hi_b), abs(lo_b - hi_a)) > FUSION_DISTANCE or n_a + n_b > FUSION_SIZE:
                        continue
                    group[rb] = ra
                    members[ra] |= members[rb]
                    needs[ra] |= needs[rb]
                    span[ra] = (min(lo_a, lo_b), max(hi_a, hi_b), n_a + n_b)
        early: dict[fx.Node, int] = {}
        for n in kernels:
            r = root(n)
            first = (members[r] & -members[r]).bit_length() - 1  # the earliest member
            if index[n] == first:
                continue
            at = self.pos[self.nodes[first]]
            early[n] = at
            pulled = above[n] >> (first + 1)
            while pulled:  # what it depends on past that place is pulled forward with it
                low = pulled & -pulled
                dep = self.nodes[first + low.bit_length()]
                early[dep] = min(early.get(dep, at), at)
                pulled ^= low
        return early

    def last_read(self, node: fx.Node) -> int:
        """Position of the last kernel that reads ``node``'s storage (through views
        and ``getitem``), or ``node``'s own position when no op reads it."""
        last = self.pos.get(node, -1)
        for alias in aliases(node):
            for user in alias.users:
                if user in self.end:
                    last = max(last, self.end[user])
        return last

    def read_by_output(self, node: fx.Node) -> bool:
        return any(u.op == "output" for a in aliases(node) for u in a.users)

    def _kernel_inputs(self, node: fx.Node) -> list[fx.Node]:
        """Buffers the kernel that writes ``node`` reads: walking back through the
        values it computes inline, to materialized values and graph inputs."""
        found, todo, seen = [], list(node.all_input_nodes), set()
        while todo:
            n = todo.pop()
            if n in seen:
                continue
            seen.add(n)
            if n.op == "placeholder":
                found.append(n)
            elif n.op != "call_function":
                continue
            elif is_view_or_getitem(n):
                todo.extend(n.all_input_nodes[:1])
            elif self.end.get(n) == self.pos.get(n) and n is not node:
                found.append(n)
            else:
                todo.extend(n.all_input_nodes)
        return found

    def _reusable_input(self, node: fx.Node, donated: bool) -> fx.Node | None:
        out = tensor_bytes(node.meta.get("val"))
        if not out:
            return None
        at = self.pos[node]
        best = None
        for buf in self._kernel_inputs(node):
            if buf.op == "placeholder" and not donated:
                continue
            size = tensor_bytes(buf.meta.get("val"))
            if (dtype_of(buf) != dtype_of(node) or not 0.95 * size <= out <= size
                    or self.last_read(buf) != at or self.read_by_output(buf)):
                continue
            if best is None or size > tensor_bytes(best.meta.get("val")):
                best = buf
        return best


def step_transients(fw: Liveness, bw: Liveness, num_fwd_outputs: int) -> list[Transient]:
    """A :class:`~offload_compiler.planning.step_peak.Transient` for every tensor Inductor likely
    writes to memory in the forward (``fw``) and backward (``bw``, positions after
    forward's) graphs, for the simulator's step peak:

    - a forward value: until its last forward read. A saved one is then counted by the
      simulator as an activation; a model output is held to the end of the step (the
      caller holds it through backward, as a loss is);
    - a backward value: until its last backward read; a gradient (a backward output)
      to the end of the step;
    - a value written over an input buffer in place counts from the op after its own:
      the input's memory holds it until then;
    - attention backward's accumulator for the query's gradient (:func:`workspace_bytes`),
      while that op runs.

    Each carries Inductor's reuse key (dtype and size) for the simulator's replay of
    its buffer pool: a value Inductor allocates may take a dead buffer of its key, and
    a value no output reads, not written over in place, enters the pool when it dies.
    Not counted: other workspaces kernels allocate inside (cuBLAS).
    """
    end = len(fw.nodes) + len(bw.nodes) - 1
    out = []
    for live in (fw, bw):
        overwritten = set(live.inplace.values())
        for node in live.nodes:
            at = live.pos[node]
            scratch = workspace_bytes(node)
            if scratch:
                out.append(Transient(scratch, at, at, workspace=True))
            if is_view_or_getitem(node) or not live.written(node) or node in live.deferred:
                continue  # a deferred matmul writes into its add's output
            val = node.meta.get("val")
            nbytes = tensor_bytes(val)
            if not nbytes:
                continue
            last = live.last_read(node)
            output = live.read_by_output(node)
            if output and (live is bw or _is_model_output(node, num_fwd_outputs)):
                last = end
            first = at + 1 if at in live.inplace else live.written_at(node)
            if first > last:
                continue
            single = isinstance(val, torch.Tensor)
            key = f"{dtype_of(node)}:{nbytes}" if single else ""
            out.append(Transient(nbytes, first, last, key=key, allocates=at not in live.inplace,
                                 pooled=not output and node not in overwritten,
                                 op=at if first < at else -1))
    return out


def workspace_bytes(node: fx.Node) -> int:
    """Memory an attention backward kernel allocates for its own use while it runs:
    an fp32 accumulator for the query's gradient, 4 bytes per query element (measured:
    cuDNN's on an H100 holds 129 MiB for a 32 Mi-element bf16 query,
    ``benchmarks/memory_peak.py``). 0 for every other op."""
    if attention_direction(node) != "backward":
        return 0
    query = op_argument(node, "query")
    return 4 * _numel(query.meta.get("val")) if isinstance(query, fx.Node) else 0


def _is_model_output(node: fx.Node, num_fwd_outputs: int) -> bool:
    for alias in aliases(node):
        for user in alias.users:
            if user.op != "output":
                continue
            outs = user.args[0] if isinstance(user.args[0], (list, tuple)) else (user.args[0],)
            if any(a is alias for a in outs[:num_fwd_outputs]):
                return True
    return False
