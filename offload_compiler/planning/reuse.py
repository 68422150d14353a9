"""What planning one graph reuses between ``"auto"``'s probes: min-cut's partitions and
their facts by the joint graph's recompute tags, and the solver's simulations on each
set of facts (:class:`Reuse`). Each is a pure function of its key: reuse changes no
plan, only the time it takes. The loop that uses it is :mod:`.search`."""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from typing import Any, Callable

import torch.fx as fx
from torch._functorch import config as functorch_config
from torch.fx._lazy_graph_module import _LazyGraphModule

from passes import Candidate

from .facts import Facts
from .solver import SimMemo

#: ``repartition()``: min-cut on the (re-tagged) joint graph, then candidate analysis:
#: ``(fw_gm, bw_gm, candidates)``.
Repartition = Callable[[], "tuple[fx.GraphModule, fx.GraphModule, list[Candidate]]"]


@dataclass
class Partition:
    fw_gm: fx.GraphModule
    bw_gm: fx.GraphModule
    candidates: list[Candidate]
    facts: Facts | None = None


def recompute_tags(joint_gm: fx.GraphModule) -> dict[str, Any]:
    """The joint graph's recompute tags by node name."""
    return {n.name: n.meta["recompute"] for n in joint_gm.graph.nodes if "recompute" in n.meta}


def restore_tags(joint_gm: fx.GraphModule, tags: dict[str, Any]) -> None:
    """Put back the recompute tags ``tags`` recorded by node name (the user's, before
    any probe tagged the graph). By name: min-cut's CSE pass replaces the joint graph's
    nodes with copies on every call."""
    for node in joint_gm.graph.nodes:
        if node.name in tags:
            node.meta["recompute"] = tags[node.name]
        else:
            node.meta.pop("recompute", None)


class Reuse:
    """What planning one graph would otherwise compute again: min-cut's partition and its
    facts for each set of recompute tags on the joint graph (``"auto"``'s probes often
    realise the same recomputation), and the simulations the solver ran on each set of
    facts (every probe solves the default partition first). Each is a pure function of
    its key, so reuse changes no plan, only the time it takes.

    Min-cut also leaves tags of its own on the joint graph (``MUST_SAVE`` where its
    cleanup says so): a reused partition puts back the tags its min-cut left.

    Min-cut's first step replaces the joint graph with its common-subexpression-
    eliminated copy. The partition the planner starts from did that already, and one
    pass leaves no two nodes alike (it substitutes each node's arguments before
    comparing), so the repartitions here skip it (``torch._functorch.config.cse``, for
    their scope): about a sixth of each min-cut's time, the same partition.

    A repartition also generates the Python code of its backward graph three times
    (min-cut's reordering and its getitem pass, then ``keep_matmuls_early``), about a
    sixth of the planning time on the GPT ``h100`` preset, and the code of a partition
    no plan takes is never read. So repartitions generate none
    (:func:`_code_deferred`); :meth:`generate_code` generates it for the partition the
    plan takes, from its final graph, as the last of those calls would have."""

    def __init__(self, joint_gm: fx.GraphModule, repartition: Repartition,
                 gather_facts: Callable[[fx.GraphModule, fx.GraphModule, list[Candidate]], Facts]):
        self.joint_gm = joint_gm
        self._repartition = repartition
        self._gather = gather_facts
        self._partitions: dict[tuple, tuple[Partition, dict[str, Any]]] = {}
        self._memos: dict[int, tuple[Facts, SimMemo]] = {}
        self._no_code: list[fx.GraphModule] = []  # partitions' modules without their code
        self.partitions_reused = 0

    def partition(self) -> Partition:
        """Min-cut's partition of the joint graph as tagged now, with its facts."""
        key = tuple(sorted(recompute_tags(self.joint_gm).items()))
        known = self._partitions.get(key)
        if known is None:
            deferred: list[fx.GraphModule] = []
            with functorch_config.patch(cse=False), _code_deferred(deferred):
                fw_gm, bw_gm, candidates = self._repartition()
            for gm in _unique(deferred):  # any other module min-cut recompiled: now
                if gm is fw_gm or gm is bw_gm:
                    self._no_code.append(gm)
                else:
                    _GENERATE(gm)
            left = recompute_tags(self.joint_gm)
            facts = self._gather(fw_gm, bw_gm, candidates)
            known = self._partitions[key] = (Partition(fw_gm, bw_gm, candidates, facts), left)
        else:
            self.partitions_reused += 1
            restore_tags(self.joint_gm, known[1])
        return known[0]

    def generate_code(self, *gms: fx.GraphModule) -> None:
        """Generate the code of those of ``gms`` a repartition left without it."""
        for gm in gms:
            if any(gm is x for x in self._no_code):
                _GENERATE(gm)
                self._no_code = [x for x in self._no_code if x is not gm]

    def memo(self, facts: Facts) -> SimMemo:
        """The solver's simulations on ``facts``, kept across solves."""
        known = self._memos.get(id(facts))
        if known is None or known[0] is not facts:
            known = self._memos[id(facts)] = (facts, SimMemo())
        return known[1]


#: ``GraphModule.recompile`` as torch defines it: the graph's Python code, generated.
_GENERATE = fx.GraphModule.recompile


@contextlib.contextmanager
def _code_deferred(deferred: list[fx.GraphModule]):
    """For its scope, in this thread, ``GraphModule.recompile`` (which generates a
    module's Python code from its graph) records the module in ``deferred`` instead;
    the caller generates the code of each (:data:`_GENERATE`) before it is read. Lazy
    modules and other threads are left alone. Put back on exit."""
    thread = threading.get_ident()

    def recompile(gm: fx.GraphModule):
        if isinstance(gm, _LazyGraphModule) or threading.get_ident() != thread:
            return _GENERATE(gm)
        deferred.append(gm)
        return None

    fx.GraphModule.recompile = recompile
    try:
        yield
    finally:
        fx.GraphModule.recompile = _GENERATE


def _unique(gms: list[fx.GraphModule]) -> list[fx.GraphModule]:
    out: list[fx.GraphModule] = []
    for gm in gms:
        if not any(gm is x for x in out):
            out.append(gm)
    return out
