"""Recompute: turn saved activations into recomputations in a partition's backward.

Given a partition (forward and backward graph modules, as min-cut made them) and, for
some of the values the forward saves, the joint graph's nodes that compute each from
values that stay available to backward (its *chain*: ops whose inputs are other ops of
the chain, values the forward still saves, or graph inputs), :func:`recompute_saved`
returns a new partition where:

- the forward no longer returns those values (ops that only computed them are gone);
  graph inputs a chain reads that backward did not receive are returned among the
  saved tensors;
- backward computes each from its chain, the chain's ops copied from the joint graph in
  the joint graph's order, right before the first op that reads the value (an op two
  chains share is computed once, before the first of them), and reads the
  recomputation where it read the saved value.

That is the partition min-cut makes when those chains are tagged ``MUST_RECOMPUTE``
(the backward computes what it does not receive from what it does), made without
running min-cut again: no flow problem, no copy of the joint graph. The input
partition is left as it is (the planner compares several).

Pairing: AOTAutograd hands backward the forward's saved tensors in the order the
forward returns them (its symbols first, in backward's placeholders); a graph input
added is returned after the last saved tensor checked for in-place changes, and
received right after it. Output metadata that lists one entry per output (``desc``,
``output_stack_traces``) follows the outputs, saved-for-backward descriptors
renumbered.
"""

from __future__ import annotations

import copy
import dataclasses

import torch
import torch.fx as fx
from torch._functorch._aot_autograd.utils import _is_primal
from torch.fx._lazy_graph_module import _make_graph_module

from .nodes import is_random, is_view_node

#: Output node metadata with one entry per output (AOTAutograd's descriptors; the
#: partitioner's stack traces).
_PER_OUTPUT_META = ("desc", "output_stack_traces")


class NotRecomputable(ValueError):
    """The saved value ``value`` cannot be recomputed in backward: its chain reads a
    value backward cannot receive (not a saved value, not a graph input, not another
    chain's op), or it is not a saved value."""

    def __init__(self, value: str, why: str):
        super().__init__(f"{value}: {why}")
        self.value = value


def recompute_saved(
    joint_gm: fx.GraphModule,
    fw_gm: fx.GraphModule,
    bw_gm: fx.GraphModule,
    num_fwd_outputs: int,
    chains: dict[str, list[str]],
) -> tuple[fx.GraphModule, fx.GraphModule]:
    """The partition ``fw_gm``/``bw_gm`` of ``joint_gm`` with each saved value named in
    ``chains`` recomputed in backward from its chain (joint node names, the value's own
    node included). Raises :class:`NotRecomputable` if a chain cannot be computed in
    backward; ``fw_gm`` and ``bw_gm`` are not changed."""
    joint = {n.name: n for n in joint_gm.graph.nodes}
    fw_graph, bw_graph = copy.deepcopy(fw_gm.graph), copy.deepcopy(bw_gm.graph)
    fw_nodes = {n.name: n for n in fw_graph.nodes}
    received = {p.name: p for p in bw_graph.find_nodes(op="placeholder")}
    (fw_out,) = fw_graph.find_nodes(op="output")
    outputs = list(fw_out.args[0])
    saved = {a.name for a in outputs[num_fwd_outputs:] if isinstance(a, fx.Node)}
    for name in chains:
        if name not in saved or name not in received:
            raise NotRecomputable(name, "not a value the forward saves for backward")
    in_chain = {n for chain in chains.values() for n in chain}
    missing = _inputs_to_receive(joint, chains, in_chain, received)
    at = _receive_inputs(bw_graph, outputs, num_fwd_outputs, missing, fw_nodes, received)

    env: dict[str, fx.Node] = {}  # joint name -> its recomputation in backward
    order = {n: i for i, n in enumerate(bw_graph.nodes)}
    first_read = {name: min(received[name].users, key=order.__getitem__, default=None) for name in chains}
    for name in sorted(chains, key=lambda x: -1 if first_read[x] is None else order[first_read[x]]):
        if first_read[name] is not None:
            with bw_graph.inserting_before(first_read[name]):
                value = _recompute(name, joint, in_chain, env, received, bw_graph)
            received[name].replace_all_uses_with(value)
        bw_graph.erase_node(received[name])

    # The forward's outputs by where each comes from: ("old", index) or ("new", node).
    sources = [("old", i) for i, a in enumerate(outputs)
               if not (i >= num_fwd_outputs and isinstance(a, fx.Node) and a.name in chains)]
    position = next((k for k, (_, i) in enumerate(sources) if i >= at), len(sources))
    sources[position:position] = [("new", fw_nodes[name]) for name in missing]
    _set_outputs(fw_out, outputs, sources, num_fwd_outputs)
    fw_graph.eliminate_dead_code()
    _merge_copies(bw_graph, set(env.values()))
    # Lazy modules where torch's flag is on, as min-cut's: their code is generated
    # when first read.
    new_fw, new_bw = _make_graph_module(fw_gm, fw_graph), _make_graph_module(bw_gm, bw_graph)
    new_fw.meta.update(fw_gm.meta)
    new_bw.meta.update(bw_gm.meta)
    return new_fw, new_bw


def saved_views(joint_gm: fx.GraphModule, fw_gm: fx.GraphModule, num_fwd_outputs: int,
                chains: dict[str, list[str]]) -> dict[str, list[str]]:
    """Saved values that view the memory of an op ``chains`` recomputes (through views
    only, a ``split``'s elements included: the key and value of an attention whose
    query is recomputed from one projection), each with its chain: those ops back to
    the op. Kept saved,
    such a view would hold that memory, which recomputing was to free; recomputed, it
    costs no kernel."""
    joint = {n.name: n for n in joint_gm.graph.nodes}
    recomputed = {n for chain in chains.values() for n in chain}
    (out,) = fw_gm.graph.find_nodes(op="output")
    found: dict[str, list[str]] = {}
    for a in out.args[0][num_fwd_outputs:]:
        if not isinstance(a, fx.Node) or a.name in chains:
            continue
        node, chain = joint.get(a.name), []
        while node is not None and is_view_node(node):
            chain.append(node.name)
            node = node.args[0] if node.args and isinstance(node.args[0], fx.Node) else None
        if chain and node is not None and node.name in recomputed:
            found[a.name] = chain
    return found


def _inputs_to_receive(joint, chains, in_chain: set[str], received) -> list[str]:
    """Graph inputs the chains read that backward does not receive yet, in joint order."""
    missing: dict[str, int] = {}
    position = {n: i for i, n in enumerate(joint)}
    for value, chain in chains.items():
        for name in chain:
            node = joint.get(name)
            if node is None or node.op != "call_function":
                raise NotRecomputable(value, f"{name} in its chain is not an op of the joint graph")
            for arg in node.all_input_nodes:
                if arg.name in in_chain or (arg.name in received and arg.name not in chains):
                    continue
                if not receivable_input(arg):
                    raise NotRecomputable(
                        value, f"{node.name} in its chain reads {arg.name}, which backward does not receive")
                missing[arg.name] = position[arg.name]
    return sorted(missing, key=missing.__getitem__)


def receivable_input(node: fx.Node) -> bool:
    """A graph input a recomputation may read: a forward input (not a tangent, seed or
    backward state) held as a tensor or symbol, which the forward can return for
    backward."""
    val = node.meta.get("val")
    return _is_primal(node) and isinstance(val, (torch.Tensor, torch.SymInt, int))


def _receive_inputs(bw_graph: fx.Graph, outputs: list, num_fwd_outputs: int, names: list[str],
                    fw_nodes: dict[str, fx.Node], received: dict[str, fx.Node]) -> int:
    """Make backward receive the graph inputs ``names`` right after the last plainly
    saved tensor (checked for in-place changes) of ``outputs``; returns the index in
    ``outputs`` the forward returns them at (before the output there)."""
    at = num_fwd_outputs
    for i in range(num_fwd_outputs, len(outputs)):
        a = outputs[i]
        if not (isinstance(a, fx.Node) and isinstance(a.meta.get("val"), torch.Tensor)) or \
                a.meta.get("saved_tensor_with_no_vc_check", False):
            break
        at = i + 1
    if not names:
        return at
    last = outputs[at - 1] if at > num_fwd_outputs else None
    if last is not None and last.name in received:
        anchor = received[last.name].next
    else:  # no plain saved tensor: after backward's symbols
        anchor = next(p for p in bw_graph.nodes if p.op != "placeholder"
                      or not isinstance(p.meta.get("val"), (torch.SymInt, int)))
    for name in names:
        node = fw_nodes.get(name)
        if node is None or node.op != "placeholder":
            raise NotRecomputable(name, "not an input of the forward graph")
        with bw_graph.inserting_before(anchor):
            p = bw_graph.placeholder(name)
        p.meta = copy.copy(node.meta)
        received[name] = p
    return at


def _recompute(name: str, joint, in_chain: set[str], env: dict[str, fx.Node],
               received: dict[str, fx.Node], bw_graph: fx.Graph) -> fx.Node:
    """The backward node holding joint value ``name`` at the insertion point: received,
    recomputed before, or recomputed now (its inputs first)."""
    todo = [name]
    while todo:
        current = todo[-1]
        if current in env:
            todo.pop()
            continue
        node = joint[current]
        pending = [a.name for a in node.all_input_nodes
                   if a.name not in env and not _available(a.name, in_chain, received)]
        if pending:
            todo.extend(pending)
            continue
        todo.pop()
        copied = bw_graph.node_copy(node, lambda a: _lookup(a.name, env, received))
        copied.meta["autograd_backward"] = True
        env[current] = copied
    return env[name]


def _available(name: str, in_chain: set[str], received) -> bool:
    """Backward has ``name`` without computing it: received and not itself recomputed."""
    return name in received and name not in in_chain


def _lookup(name: str, env: dict[str, fx.Node], received: dict[str, fx.Node]) -> fx.Node:
    return env[name] if name in env else received[name]


def _set_outputs(fw_out: fx.Node, outputs: list, sources: list[tuple[str, object]],
                 num_fwd_outputs: int) -> None:
    """Set the forward's outputs from ``sources`` (``("old", index into outputs)`` or
    ``("new", node)``), with the output metadata that has an entry per output carried
    along: an added output's descriptor is a saved-for-backward one, and those are
    renumbered."""
    for key in _PER_OUTPUT_META:
        entries = fw_out.meta.get(key)
        if not isinstance(entries, list) or len(entries) != len(outputs):
            continue
        new = [entries[x] if kind == "old" else _added_entry(key, x) for kind, x in sources]
        if key == "desc":
            new = new[:num_fwd_outputs] + [_renumbered(e, i) for i, e in enumerate(new[num_fwd_outputs:])]
        fw_out.meta[key] = new
    fw_out.args = (tuple(outputs[x] if kind == "old" else x for kind, x in sources),) + tuple(fw_out.args[1:])


def _added_entry(key: str, node: fx.Node):
    if key == "desc":
        from torch._functorch._aot_autograd.descriptors import SavedForBackwardsAOTOutput

        return SavedForBackwardsAOTOutput(0)  # renumbered by the caller
    return node.meta.get("stack_trace")


def _renumbered(desc, idx: int):
    """A saved-for-backward descriptor with index ``idx`` (other descriptors as they are)."""
    if dataclasses.is_dataclass(desc) and any(f.name == "idx" for f in dataclasses.fields(desc)):
        return dataclasses.replace(desc, idx=idx)
    return desc


def _merge_copies(graph: fx.Graph, copies: set[fx.Node]) -> None:
    """Where a copied op computes what another op of ``graph`` computes (same op, same
    inputs; min-cut recomputed it already, reading the value now recomputed), the
    later of the two reads the earlier: backward computes it once, as min-cut would."""
    seen: dict[tuple, fx.Node] = {}
    targets = {c.target for c in copies}
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in targets or is_random(node) or node.is_impure():
            continue
        try:
            key = (node.target, _frozen(node.args), _frozen(node.kwargs))
            hash(key)
        except TypeError:
            continue
        earlier = seen.get(key)
        if earlier is None:
            seen[key] = node
        elif earlier in copies or node in copies:
            node.replace_all_uses_with(earlier)
            graph.erase_node(node)
            if node in copies:
                copies.add(earlier)


def _frozen(x):
    """``x`` (an op's arguments) as a hashable key; nodes by identity."""
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, *(_frozen(a) for a in x))
    if isinstance(x, dict):
        return ("dict", *sorted((k, _frozen(v)) for k, v in x.items()))
    if isinstance(x, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        raise TypeError("symbolic")
    return x
