"""What planning one graph reuses between ``"auto"``'s probes: the partitions that
realise each set of recomputations and their facts, and the solver's simulations on
each set of facts (:class:`Reuse`). Each is a pure function of its key: reuse changes
no plan, only the time it takes. The loop that uses it is :mod:`.search`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch.fx as fx

from passes import Candidate
from passes.recompute_saved import NotRecomputable, recompute_saved

from .facts import Facts
from .solver import SimMemo

#: ``analyze(fw_gm, bw_gm)``: the saved values of a partition as candidates
#: (``passes.analyze_candidates`` with the backend's options).
Analyze = Callable[[fx.GraphModule, fx.GraphModule], "list[Candidate]"]


@dataclass
class Partition:
    fw_gm: fx.GraphModule
    bw_gm: fx.GraphModule
    candidates: list[Candidate]
    facts: Facts | None = None


def realise(joint_gm: fx.GraphModule, start: Partition, num_fwd_outputs: int,
            chains: dict[str, list[str]], analyze: Analyze) -> tuple[Partition, dict[str, str]]:
    """``start`` (min-cut's partition) with the saved values of ``chains`` recomputed in
    backward from their chains (``passes.recompute_saved``), and the values that could
    not be (name -> why; they stay saved). No facts gathered."""
    chains, left_out = dict(chains), {}
    while chains:
        try:
            fw_gm, bw_gm = recompute_saved(joint_gm, start.fw_gm, start.bw_gm, num_fwd_outputs, chains)
        except NotRecomputable as e:
            if e.value not in chains:
                raise
            left_out[e.value] = str(e)
            del chains[e.value]
            continue
        return Partition(fw_gm, bw_gm, analyze(fw_gm, bw_gm)), left_out
    return start, left_out


class Reuse:
    """What planning one graph would otherwise compute again: the partition that
    realises each set of recomputations, with its facts (``"auto"``'s probes often
    realise the same ones), and the simulations the solver ran on each set of facts
    (every probe solves the default partition first). Each is a pure function of its
    key, so reuse changes no plan, only the time it takes.

    A realised partition's modules generate their Python code when it is first read
    (lazy modules: ``partitioner._lazy_modules``): the code of a partition no plan
    takes is never generated."""

    def __init__(self, joint_gm: fx.GraphModule, start: Partition, num_fwd_outputs: int,
                 analyze: Analyze,
                 gather_facts: Callable[[fx.GraphModule, fx.GraphModule, list[Candidate]], Facts]):
        self.joint_gm = joint_gm
        self.start = start
        self.num_fwd_outputs = num_fwd_outputs
        self._analyze = analyze
        self._gather = gather_facts
        self._partitions: dict[frozenset, tuple[Partition, dict[str, str]]] = {}
        self._memos: dict[int, tuple[Facts, SimMemo]] = {}
        self.partitions_reused = 0

    def partition(self, chains: dict[str, list[str]]) -> tuple[Partition, dict[str, str]]:
        """The start partition with the saved values of ``chains`` recomputed, with its
        facts, and the values that could not be (name -> why)."""
        key = frozenset(chains)
        known = self._partitions.get(key)
        if known is None:
            part, left_out = realise(self.joint_gm, self.start, self.num_fwd_outputs, chains,
                                     self._analyze)
            if part is not self.start:
                part.facts = self._gather(part.fw_gm, part.bw_gm, part.candidates)
            known = self._partitions[key] = (part, left_out)
        else:
            self.partitions_reused += 1
        return known

    def memo(self, facts: Facts) -> SimMemo:
        """The solver's simulations on ``facts``, kept across solves."""
        known = self._memos.get(id(facts))
        if known is None or known[0] is not facts:
            known = self._memos[id(facts)] = (facts, SimMemo())
        return known[1]
