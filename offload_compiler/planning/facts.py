"""Facts: what the simulator and the solver need about one partition, read off FX.

For every tensor the forward saves: bytes, producer position, last forward use, first
and last backward use, the cost to recompute it from what else is saved
(``costs.NodeCosts`` over its chain in the joint graph), and whether it may be
offloaded (``passes.analyze_candidates``) or recomputed (no random op in the chain, no
op that writes its input, no ``MUST_SAVE`` tag, only graph inputs among its inputs that
are not saved, a short chain; ``passes.recompute_saved`` realises it). Also: simulating
a partition's decisions (:func:`final_simulation`). The loop that uses them is
:mod:`.search`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.fx as fx
from torch.utils.checkpoint import CheckpointPolicy

from passes import Candidate
from passes.analyze_candidates import saved_values
from passes.materialization import graphs_fixed, is_materialized
from passes.nodes import aliases, is_extern, is_random, tensor_bytes, view_root
from passes.recompute_saved import receivable_input

from .costs import NodeCosts, chain_ms
from .fusion import extern_consumers, fused_backward_reads, recompute_free_reads
from .hardware import HardwareProfile
from .liveness import Liveness, step_transients
from ..decision import KEEP, OFFLOAD, Decision
from ..reporting.timeline import Origins
from .simulator import Lanes, SimResult, SimTensor, Transient, simulate
from .solver import Option

# Absent before torch 2.9; PREFER_CPU_OFFLOAD is left to the planner's judgement.
_MUST_OFFLOAD = getattr(CheckpointPolicy, "MUST_CPU_OFFLOAD", None)
MAX_CHAIN = 64


@dataclass
class Facts:
    """What the simulator needs about one partition, plus the maps back to FX."""

    fw_nodes: list[fx.Node]
    bw_nodes: list[fx.Node]
    fw_ms: list[float]
    bw_ms: list[float]
    tensors: list[SimTensor]
    options: dict[str, Option]
    chains: dict[str, list[str]]
    """Joint-graph node names to recompute for each tensor that may be recomputed."""
    bw_out_bytes: list[int] = dataclasses.field(default_factory=list)
    """Bytes each backward op writes to memory (its output, where materialized)."""
    transients: list[Transient] = dataclasses.field(default_factory=list)
    """Every other tensor the step writes, for the step peak (``simulator.simulate``;
    ``liveness.step_transients``)."""
    slowed: tuple[list[bool], list[bool]] | None = None
    """Which forward and backward ops a running copy slows (``copy_slowdown``): the
    memory-bound ones, not matmuls or attention. Slowing every op priced offloading
    above recomputation, and those plans ran 2 to 3 ms slower on an H100 than plans
    that offload (``benchmarks/RESULTS.md``, session 4)."""

    bw_recomputes: list[bool] = dataclasses.field(default_factory=list)
    """Which backward ops are recomputations (read no gradient: ``fusion.recompute_free_reads``),
    their times scaled by ``NodeCosts.recompute_scale`` as well."""

    def compute_ms(self) -> tuple[float, float, float]:
        """The forward's and the backward's op times summed, and the backward's
        recomputations' among them (``Predictions.bw_recompute_ms``)."""
        recomputed = sum(ms for ms, rc in zip(self.bw_ms, self.bw_recomputes) if rc)
        return sum(self.fw_ms), sum(self.bw_ms), recomputed

    def kernels(self) -> tuple[int, int]:
        """Forward and backward ops that take GPU time (what the host lane counts)."""
        return sum(ms > 0 for ms in self.fw_ms), sum(ms > 0 for ms in self.bw_ms)


def _recompute_chain(joint: dict[str, fx.Node], name: str, saved: set[str]) -> tuple[list[fx.Node], str]:
    """Joint nodes to recompute ``name`` from saved values and inputs, or a reason not to."""
    root = joint.get(name)
    if root is None or root.op != "call_function":
        return [], "not an op of the joint graph"
    chain, todo, seen = [], [root], {root}
    while todo:
        node = todo.pop()
        if node is not root and node.name in saved:
            continue
        if node.op == "placeholder":
            if not receivable_input(node):
                return [], f"reads {node.name}, an input backward cannot receive"
            continue
        if node.op != "call_function":
            return [], f"depends on {node.op} {node.name}"
        if is_random(node):
            return [], f"random op {node.target} in its chain (its RNG state is not replayed)"
        if isinstance(node.target, torch._ops.OpOverload) and node.target._schema.is_mutable:
            return [], f"{node.name} ({node.target}) writes its input"
        if node.meta.get("recompute") == CheckpointPolicy.MUST_SAVE:
            return [], f"{node.name} is tagged MUST_SAVE"
        chain.append(node)
        if len(chain) > MAX_CHAIN:
            return [], f"recompute chain longer than {MAX_CHAIN} ops"
        for arg in node.all_input_nodes:
            if arg not in seen:
                seen.add(arg)
                todo.append(arg)
    return chain, ""


def gather(fw_gm: fx.GraphModule, bw_gm: fx.GraphModule, num_fwd_outputs: int,
           candidates: list[Candidate], joint_gm: fx.GraphModule | None,
           cost: NodeCosts, min_bytes: int = 0, *, pool: bool = True) -> Facts:
    """Facts about ``fw_gm``/``bw_gm`` for the simulator; ``cost`` gives node run times.
    Tensors under ``min_bytes`` are not recomputed (``OffloadConfig.min_offload_bytes``).
    ``pool``: the graphs run as Inductor compiles them, with its buffer pool (the step
    peak replays it); without it (``inner_compiler="eager"``: the FX graph frees each
    value after its last use), no value waits in a pool."""
    with graphs_fixed():  # nothing here changes a graph
        facts = _gather(fw_gm, bw_gm, num_fwd_outputs, candidates, joint_gm, cost, min_bytes)
    if not pool:
        facts.transients = [t._replace(key="", pooled=False) for t in facts.transients]
    return facts


def _gather(fw_gm: fx.GraphModule, bw_gm: fx.GraphModule, num_fwd_outputs: int,
            candidates: list[Candidate], joint_gm: fx.GraphModule | None,
            cost: NodeCosts, min_bytes: int) -> Facts:
    fw_nodes = [n for n in fw_gm.graph.nodes if n.op == "call_function"]
    bw_nodes = [n for n in bw_gm.graph.nodes if n.op == "call_function"]
    fw_live = Liveness(fw_nodes)
    bw_live = Liveness(bw_nodes, offset=len(fw_nodes), donated=True)
    fw_pos = fw_live.pos
    bw_pos = {n: i for i, n in enumerate(bw_nodes)}
    fw_by_name = {n.name: n for n in fw_gm.graph.nodes}
    bw_inputs = {p.name: p for p in bw_gm.graph.find_nodes(op="placeholder")}
    joint = {n.name: n for n in joint_gm.graph.nodes} if joint_gm is not None else {}
    saved = {n.name for n in saved_values(fw_gm, num_fwd_outputs)}
    fused = fused_backward_reads(joint_gm.graph, saved={joint[n] for n in saved if n in joint}) \
        if joint_gm is not None else set()
    tensors, options, chains = [], {}, {}
    read_by: dict[str, list[str]] = {}  # saved value -> the recompute chains that read it
    for c in candidates:
        node = fw_by_name[c.name]
        placeholder = bw_inputs.get(c.name)
        if node.op != "call_function" or placeholder is None or c.nbytes == 0:
            continue  # inputs and parameters: not activation memory
        bw_users = [u for a in aliases(placeholder) for u in a.users if u in bw_pos]
        if not bw_users:
            continue
        chain, why_not = _recompute_chain(joint, c.name, saved) if joint else ([], "no joint graph")
        tag = joint[c.name].meta.get("recompute") if c.name in joint else None
        forced = None
        if tag == CheckpointPolicy.MUST_SAVE:
            forced = KEEP
        elif tag is not None and tag == _MUST_OFFLOAD and c.eligible:
            forced = OFFLOAD
        if tag == CheckpointPolicy.PREFER_SAVE and not why_not:
            why_not = "tagged PREFER_SAVE"
            chain = []
        if c.nbytes < min_bytes and not why_not:
            # Saves next to nothing, and may cost a kernel: recomputing a layer norm's
            # statistics (64 KiB) moved its weight gradient into a reduction kernel
            # of its own, about 100 us each on an H100 (RESULTS.md, session 6).
            why_not = f"{c.nbytes} bytes < min_offload_bytes={min_bytes}"
            chain = []
        rc_ms = chain_ms(chain, cost, fused.before(extern_consumers(joint[c.name], fused.backward))) if chain else 0.0
        tensors.append(SimTensor(
            name=c.name, nbytes=c.nbytes, produced=fw_pos[node],
            last_fw_use=max(fw_live.last_read(view_root(node)), fw_pos[node]),
            first_bw_use=min(bw_pos[u] for u in bw_users),
            last_bw_use=bw_live.last_read(placeholder) - len(fw_nodes),
            recompute_ms=rc_ms,
        ))
        options[c.name] = Option(
            can_offload=c.eligible, can_recompute=bool(chain) and not why_not, forced=forced,
            why_not_offload="" if c.eligible else c.reason, why_not_recompute=why_not,
        )
        chains[c.name] = [n.name for n in chain]
        for read in sorted({a.name for n in chain for a in n.all_input_nodes if a.name in saved} - set(chains[c.name])):
            read_by.setdefault(read, []).append(c.name)
    tensors = _share_recomputation(tensors, chains, joint, cost)
    tensors = [dataclasses.replace(x, read_by=tuple(read_by.get(x.name, ()))) for x in tensors]
    # What a backward op writes is held while it runs; not when written over its input.
    bw_out = [tensor_bytes(n.meta.get("val"))
              if is_materialized(n) and bw_live.pos[n] not in bw_live.inplace else 0
              for n in bw_nodes]
    slowed = ([not is_extern(n) for n in fw_nodes], [not is_extern(n) for n in bw_nodes])
    transients = step_transients(fw_live, bw_live, num_fwd_outputs)
    fw, bw, rc = cost.fw_scale, cost.bw_scale, cost.recompute_scale  # measured (planning/replan.py)
    if fw * rc != 1.0:
        tensors = [dataclasses.replace(x, recompute_ms=x.recompute_ms * fw * rc, shared_ms=x.shared_ms * fw * rc)
                   for x in tensors]
    free = recompute_free_reads(bw_gm.graph)  # recomputations priced as the solver priced them
    bw_ms = [cost(n, free.get(n, frozenset())) * bw * (rc if n in free else 1.0) for n in bw_nodes]
    return Facts(fw_nodes, bw_nodes, [cost(n) * fw for n in fw_nodes], bw_ms, tensors, options, chains,
                 bw_out_bytes=bw_out, slowed=slowed, transients=transients,
                 bw_recomputes=[n in free for n in bw_nodes])


def _share_recomputation(tensors: list[SimTensor], chains: dict[str, list[str]],
                         joint: dict[str, fx.Node], cost: NodeCosts) -> list[SimTensor]:
    """Group tensors whose recompute chains run the same extern kernels (q, k and v,
    views of one projection; an attention's output and its logsumexp): recomputing a
    second one of a group costs its chain less those kernels, which run once."""
    by_kernels: dict[tuple[str, ...], list[int]] = {}
    for i, x in enumerate(tensors):
        kernels = tuple(sorted(n for n in chains.get(x.name, ()) if is_extern(joint[n])))
        if kernels:
            by_kernels.setdefault(kernels, []).append(i)
    out = list(tensors)
    for kernels, members in by_kernels.items():
        if len(members) < 2:
            continue
        shared = sum(cost(joint[n]) for n in kernels)
        for i in members:
            x = out[i]
            out[i] = dataclasses.replace(x, group=kernels[0], shared_ms=min(shared, x.recompute_ms))
    return out


#: Slack per copy, as a fraction of its duration (``Lanes.lead``). Measured on an H200:
#: reloads planned to end just in time stalled backward by about 0.5 ms each, the
#: compute before them running faster than estimated.
COPY_LEAD = 0.5


def lanes_of(hw: HardwareProfile, copy_margin: float = 0.0, lead: float = COPY_LEAD,
             chained: bool = False) -> Lanes:
    """The copy lanes the planner plans with: the profile's bandwidths less ``copy_margin``,
    and ``lead`` of slack per copy; ``chained``: the graph is one call of a chain
    (``per_block``)."""
    keep = 1.0 - copy_margin
    return Lanes(d2h_gbps=hw.d2h_gbps * keep, h2d_gbps=hw.h2d_gbps * keep, lead=lead,
                 compute_slowdown=hw.copy_slowdown, chained=chained)


def final_simulation(facts: Facts, decisions: dict[str, Decision], lanes: Lanes) -> SimResult:
    """Simulate ``decisions`` (by tensor name; the rest kept) on this partition, recording
    the timeline."""
    tensors = [dataclasses.replace(x, decision=decisions.get(x.name, KEEP)) for x in facts.tensors]
    result = simulate(facts.fw_ms, facts.bw_ms, tensors, lanes, record=True,
                      bw_out_bytes=facts.bw_out_bytes, slowed=facts.slowed,
                      transients=facts.transients)
    result.origins = Origins(facts.fw_nodes, facts.bw_nodes)  # named when a report asks
    return result


def resimulation(facts: Facts, decisions: dict[str, Decision], lanes: Lanes,
                 final: SimResult) -> Callable[..., SimResult]:
    """The plan of ``final`` (its ``decisions`` on this partition, its copies released
    and reloaded where ``final`` put them, as compiled) simulated again as
    ``again(fw_k, bw_k, **lanes_changes)``: forward op times (recomputations included)
    ``fw_k`` times, backward ones ``bw_k`` times what they were (recomputations ``rc_k``
    times besides), with ``lanes_changes``
    (measured host times, bandwidths). What a measurement's times are fitted with
    (``replan.corrected``)."""
    tensors = [dataclasses.replace(x, decision=decisions.get(x.name, KEEP),
                                   release_after=final.release_after.get(x.name),
                                   reload_before=final.reload_before.get(x.name)) for x in facts.tensors]

    recomputes = facts.bw_recomputes or [False] * len(facts.bw_ms)

    def again(fw_k: float, bw_k: float, rc_k: float = 1.0, **lanes_changes: Any) -> SimResult:
        scaled = [dataclasses.replace(x, recompute_ms=x.recompute_ms * fw_k * rc_k, shared_ms=x.shared_ms * fw_k * rc_k)
                  for x in tensors]
        bw_ms = [ms * bw_k * (rc_k if rc else 1.0) for ms, rc in zip(facts.bw_ms, recomputes)]
        return simulate([ms * fw_k for ms in facts.fw_ms], bw_ms, scaled,
                        dataclasses.replace(lanes, **lanes_changes), bw_out_bytes=facts.bw_out_bytes,
                        slowed=facts.slowed)
    return again
