"""Which reads a recomputation shares with the backward's own kernels.

Inductor fuses kernels by shared reads. A recomputation that reads a value some kernel
of the backward reads anyway is computed inside that kernel: its read of the value is
free, and it launches no kernel of its own (``costs.node_ms``, ``costs.chain_ms``). It
can be, though, only where that kernel may run before the recomputation is needed: a
recomputed value an extern kernel reads (a matmul, a convolution) is written before
that kernel runs, and a backward kernel that waits for the extern kernel's result
cannot hold it.

On an H200 (``benchmarks/RESULTS.md``, session 44) ViT-B/16's 20 recomputed layer norm
outputs added 92 us to the norms' backward kernels, and its 12 GELU outputs 155 us to
the GELU backward's, with no kernel of their own: the weight gradient's matmul that
reads each of them is a matmul of its own, free to run after. ResNet-50's recomputed
ReLU outputs are read by the convolution's backward, which computes the gradient its
norm's backward kernels then read: priced as shared, its plan recomputed 163 values and
measured 33% over its step with nothing moved.
"""

from __future__ import annotations

import torch.fx as fx

from passes.nodes import aliases, is_extern, is_free


def tangent_dependent(graph: fx.Graph) -> set[fx.Node]:
    """Nodes of ``graph`` that depend on a tangent input: the backward's own ops (in a
    backward graph, the others are recomputations)."""
    backward: set[fx.Node] = set()
    for node in graph.nodes:
        if node.op == "placeholder":
            if "tangent" in node.name:
                backward.add(node)
        elif any(a in backward for a in node.all_input_nodes):
            backward.add(node)
    return backward


class FusedReads(dict):
    """Values a backward kernel reads anyway, each mapped to those kernels (the
    backward's ops other than extern ones that read it, directly or through values
    recomputed inside them). ``backward``: the backward's own ops. Membership alone
    (``value in reads``) ignores when the kernels run; :meth:`before` does not."""

    def __init__(self, readers: dict[fx.Node, set[fx.Node]], backward: set[fx.Node], graph: fx.Graph) -> None:
        super().__init__(readers)
        self.backward = backward
        self.pos = {n: i for i, n in enumerate(graph.nodes)}

    def before(self, consumers: list[fx.Node], shared: "SharedBefore | None" = None) -> "SharedBefore":
        """The values read by a kernel that may run before every one of ``consumers``
        (``shared``: what decides its launch, if not these reads)."""
        return SharedBefore(self, consumers, shared)

    def after(self, consumers: list[fx.Node], node: fx.Node) -> bool:
        """Whether ``node`` depends on one of ``consumers`` (only nodes up to its
        position in the graph are looked at: the graph is in topological order)."""
        limit = self.pos[node]
        todo, seen = [c for c in consumers if self.pos[c] <= limit], set()
        while todo:
            n = todo.pop()
            if n is node:
                return True
            if n in seen:
                continue
            seen.add(n)
            todo.extend(u for u in n.users if self.pos.get(u, limit + 1) <= limit)
        return False


class SharedBefore:
    """``value in shared``: a kernel of the backward reads ``value`` anyway and may run
    before each of the recomputation's extern consumers (:meth:`FusedReads.before`).
    ``shared``: the same for the reads that decide whether the recomputation runs inside
    such a kernel, with no launch of its own (itself, unless given)."""

    def __init__(self, reads: FusedReads, consumers: list[fx.Node], shared: "SharedBefore | None" = None) -> None:
        self.reads, self.consumers, self.known = reads, consumers, {}
        self.shared = self if shared is None else shared

    def __contains__(self, value: object) -> bool:
        known = self.known.get(value)
        if known is None:
            kernels = self.reads.get(value, ())
            known = self.known[value] = any(not self.reads.after(self.consumers, k) for k in kernels)
        return known

    def __bool__(self) -> bool:
        return bool(self.reads)


def fused_backward_reads(joint: fx.Graph, backward: set[fx.Node] | None = None,
                         saved: frozenset[fx.Node] | set[fx.Node] | None = None) -> FusedReads:
    """Values of ``joint`` (a joint forward-backward graph, or a backward graph) that a
    backward op other than an extern kernel reads, with those ops: Inductor reads them in
    a fused kernel of the backward. Backward ops are those that depend on a tangent input
    (``backward``, if the caller has them).

    ``saved`` names what the forward hands the backward (in a backward graph: nothing
    but its inputs, ``frozenset()``). A value the backward reads that is not saved is
    recomputed there, and a pointwise one inside the kernel that reads it: that kernel
    then reads what the value is computed from, back to saved values, graph inputs and
    extern results, and those count as read too. Under autocast a GELU backward reads the
    matmul result through its float32 cast (and the pieces of the GELU's derivative
    that need no gradient); the result itself is what the fused kernel reads. Without
    ``saved``, every forward value counts as saved (views are looked through)."""
    backward = tangent_dependent(joint) if backward is None else backward
    readers: dict[fx.Node, set[fx.Node]] = {}
    for kernel in joint.nodes:
        if kernel not in backward or kernel.op != "call_function" or is_extern(kernel) or is_free(kernel):
            continue
        todo, seen = list(kernel.all_input_nodes), set()
        while todo:
            n = todo.pop()
            if n in seen or n in backward:
                continue
            seen.add(n)
            readers.setdefault(n, set()).add(kernel)
            if is_free(n) or not (n.op == "placeholder" or is_extern(n) or saved is None or n in saved):
                todo.extend(n.all_input_nodes)  # a view, or a pointwise value recomputed in the kernel
    return FusedReads(readers, backward, joint)


def extern_consumers(value: fx.Node, backward: set[fx.Node]) -> list[fx.Node]:
    """The extern kernels of the backward that read ``value`` (through views): a
    recomputation of it is written before the first of them runs."""
    return [u for a in aliases(value) for u in a.users if u in backward and is_extern(u)]


def recompute_free_reads(bw: fx.Graph) -> dict[fx.Node, SharedBefore]:
    """For each recomputation in a backward graph (an op that depends on no tangent),
    the values it reads that a backward kernel reads anyway and may run before the
    extern kernels its result reaches: reads ``costs.node_ms`` does not charge, as
    ``costs.chain_ms`` prices the same recomputation in the joint graph. Without it the
    partition that realises a plan priced each recomputed layer norm output of ViT-B/16
    20 us above the solver's price of it (the normalised input, which the norm's
    backward reads, read again), and ``"auto"`` settled 0.4 GiB higher."""
    own = tangent_dependent(bw)
    # A read is free where a backward kernel reads the value itself. One it reads through
    # recomputed pieces is paid for once, by the piece that reads it (in the graph with
    # nothing recomputed too); sharing it still puts the recomputation inside the kernel.
    fused, through = fused_backward_reads(bw, own), fused_backward_reads(bw, own, saved=frozenset())
    out = {}
    for n in bw.nodes:
        if n.op != "call_function" or n in own:
            continue
        consumers, todo, seen = [], list(n.users), set()
        while todo:  # the extern kernels of the backward this recomputation's result reaches
            u = todo.pop()
            if u in seen:
                continue
            seen.add(u)
            if u in own:
                if is_extern(u):
                    consumers.append(u)
            else:
                todo.extend(u.users)
        out[n] = fused.before(consumers, through.before(consumers))
    return out
