"""Plan records: what the backend decided for one compiled graph, as plain data.

``GraphPlan`` holds one ``DecisionRecord`` per saved activation (``decision`` is the
:class:`~offload_compiler.decision.Decision` vocabulary) and the planner's
``Predictions``. Reports, dumps, ``explain`` and ``compare`` read these; the planner
(``offload_compiler.planning``) writes them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Iterator

from passes.analyze_candidates import ACTIVATION, INPUT  # DecisionRecord.kind
from passes.nodes import planned_sizes

from ..decision import Decision
from ..nbytes import nbytes_text


#: The fields of :class:`Predictions` that add up over a model's graphs.
ADDITIVE = ("activation_peak_bytes", "baseline_activation_peak_bytes", "peak_bytes",
            "step_peak_bytes", "baseline_step_peak_bytes", "step_ms", "baseline_step_ms",
            "stall_ms", "fw_compute_ms", "bw_compute_ms", "bw_recompute_ms")


@dataclass(frozen=True)
class Predictions(Mapping):
    """The planner's predictions for one graph (``policy="cost_model"``, or any graph
    whose transfers were simulated). Also readable as a mapping by field name, which is
    how JSON records and ``explain`` present it."""

    activation_peak_bytes: int
    """The predicted activation peak: bytes of forward values held for backward, with
    the output of the backward op running (what ``memory_budget`` bounds)."""
    baseline_activation_peak_bytes: int
    """The same with nothing moved."""
    peak_bytes: int
    """Same as ``activation_peak_bytes`` (kept for earlier readers of ``plan.json``)."""
    peak_time_ms: float
    """When in the simulated step the activation peak falls."""
    step_peak_bytes: int
    """The predicted peak of the whole step above what was held before it: the
    activation peak plus forward and backward intermediates and parameter gradients."""
    baseline_step_peak_bytes: int
    """The same with nothing moved."""
    step_ms: float
    """Predicted step time (forward and backward of this graph)."""
    baseline_step_ms: float
    """The same with nothing moved."""
    stall_ms: float
    """Predicted time compute waits for copies."""
    budget_bytes: int
    """The activation budget planned for, in bytes; ``-1`` for ``"auto"``."""
    fw_compute_ms: float = 0.0
    """Compute time of the forward's ops, summed (no stalls): what a measurement of the
    forward's compute is compared with to correct the estimates (``planning/replan.py``)."""
    bw_compute_ms: float = 0.0
    """The same for the backward's ops (recomputations included)."""
    bw_recompute_ms: float = 0.0
    """Of ``bw_compute_ms``, the recomputations' (backward ops that read no gradient)."""
    kernels: tuple[int, int] = (0, 0)
    """The forward's and the backward's ops that take GPU time (what the host issues
    besides the transfer ops): a measurement of the host's time is spread over them."""
    bw_pool_bytes: int = 0
    """What Inductor's buffer pool would add to the step peak in a backward with transfer
    ops; above 0 that backward is compiled without the pool (``planning/step_peak.py``)."""

    def __getitem__(self, key: str) -> Any:
        if key not in self._names():
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())

    @classmethod
    def _names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def summed(cls, many: list[Mapping[str, Any]]) -> dict[str, float]:
        """Sums over graphs of the fields that add up (bytes held, times taken; not the
        peak's time or the budget): a model's graphs run one after another."""
        return {name: sum(p[name] for p in many) for name in cls._names() if name in ADDITIVE}

    @classmethod
    def of(cls, baseline: Any, final: Any, budget_bytes: int | None = None,
           compute_ms: tuple[float, ...] = (0.0, 0.0), unmodelled_bytes: int = 0,
           kernels: tuple[int, int] = (0, 0)) -> "Predictions":
        """From the simulation of a plan (``final``) and of nothing moved (``baseline``);
        ``unmodelled_bytes`` (measured, ``planning/replan.py``) is added to the step peaks."""
        return cls(
            activation_peak_bytes=final.peak_bytes,
            baseline_activation_peak_bytes=baseline.peak_bytes,
            peak_bytes=final.peak_bytes,
            peak_time_ms=final.peak_time_ms,
            step_peak_bytes=final.step_peak_bytes + unmodelled_bytes,
            baseline_step_peak_bytes=baseline.step_peak_bytes + unmodelled_bytes,
            step_ms=final.step_ms,
            baseline_step_ms=baseline.step_ms,
            stall_ms=final.stall_ms,
            budget_bytes=-1 if budget_bytes is None else budget_bytes,
            fw_compute_ms=compute_ms[0],
            bw_compute_ms=compute_ms[1],
            bw_recompute_ms=compute_ms[2] if len(compute_ms) > 2 else 0.0,
            kernels=kernels,
            bw_pool_bytes=final.bw_pool_bytes,
        )


@dataclass(frozen=True)
class DecisionRecord:
    """One tensor the forward saves for backward, what was decided for it, and why."""

    name: str
    """Its name in the forward graph (``mm_3``)."""
    producer: str
    """The op that made it (``aten.mm.default``; ``placeholder`` for a graph input)."""
    shape: tuple
    dtype: str
    device: str
    nbytes: int
    decision: Decision
    reason: str
    module_path: str = ""
    """The module that computed it, ``"blocks.0.attn.qkv"`` (for a graph input, the module
    of its first reader); ``""`` for the root module or where Dynamo recorded none."""
    source_line: str = ""
    """The source line that computed it (for a graph input, its first reader),
    ``"gpt.py:85 in forward"``, or ``""``."""
    kind: str = ACTIVATION
    """``"activation"``, or ``"input"``: a parameter, buffer or model input (or a view of
    one), saved as it is; it outlives the graph, so it is always kept and is not counted
    among the saved activations."""


@dataclass
class GraphPlan:
    """What the backend decided for one compiled graph."""

    graph_id: int
    decisions: list[DecisionRecord] = field(default_factory=list)
    fw_graph: Any = field(default=None, repr=False)
    """The rewritten forward ``fx.GraphModule`` (before the inner compiler)."""
    bw_graph: Any = field(default=None, repr=False)
    """The rewritten backward ``fx.GraphModule`` (before the inner compiler)."""
    predicted: Predictions | None = None
    """The planner's predictions (``None`` where nothing was simulated)."""
    hardware: dict[str, Any] = field(default_factory=dict)
    """The hardware profile the plan was costed with (``planning.hardware.HardwareProfile``
    fields; ``policy="cost_model"`` and graphs whose transfers were simulated)."""
    simulation: Any = field(default=None, repr=False)
    """The simulated timeline of the final plan (``simulator.SimResult``)."""
    baseline_simulation: Any = field(default=None, repr=False)
    """The simulated timeline with nothing moved (same partition as the plan's start)."""
    resimulate: Any = field(default=None, repr=False, compare=False)
    """This plan simulated again with other op times and lanes
    (``planning.facts.resimulation``), which a measurement is fitted with; ``None``
    where the plan was not simulated in this process."""
    note: str = ""
    """Anything the planner wants said: a budget it could not meet, for example."""
    dump_folder: str | None = None
    """Where this graph's dump was written, if dumping was on."""
    off_device: bool = False
    """No saved tensor is on an offload device: the graph passed through unchanged."""
    planned_sizes: dict[str, int] = field(default_factory=planned_sizes)
    """For a graph with dynamic sizes, the values of its size symbols the plan was made
    for, by symbol (``{"s0": 256}``): the sizes in force (``passes.nodes.sizes_at``) when
    the record was made. Empty for a static graph."""
    measured: Any = None
    """A call of the compiled graph as measured on the GPU (``runtime.measure.Measured``):
    time, stalls, copies, the step peak and what held it; ``None`` until measured (the
    backend measures in the first steps, ``OffloadConfig.replan``)."""
    corrections: dict[str, Any] = field(default_factory=dict)
    """The planner inputs corrected from a measurement that this plan was made with
    (``planning.replan.Corrections``), or, for a plan a graph went back to, that its
    predictions were made again with; empty for a plan made from estimates alone."""
    provisional: bool = False
    """``"auto"``'s first plan of a graph the backend measures: the solver's plan, not
    searched over realised partitions; the measurement is always followed by a re-plan,
    which searches on the measured inputs (``planning.search.plan_graph``)."""
    replaces: int | None = None
    """The graph id of the plan this one replaced after a measurement, if any."""
    reverted: bool = False
    """Measured worse than the plan it replaced (slower, and no less memory at its step
    peak; or, with ``"auto"``, past ``max_overhead`` where that plan measured faster):
    the graph went back to that plan. Also a plan under ``memory_limit`` predicted no
    faster than the plan in force, never run (``measured`` stays ``None``). ``note``
    says which."""

    def measured_text(self) -> str:
        """Predicted against measured, in one line (empty when not measured)."""
        m, p = self.measured, self.predicted
        if m is None or p is None:
            return ""
        timed = (f" (the {m.timed_as} of {len(m.timed_ms)} timed calls: "
                 f"{', '.join(f'{ms:.2f}' for ms in m.timed_ms)} ms)" if len(m.timed_ms) > 1 else "")
        parts = [f"step {m.step_ms:.2f} ms measured{timed} vs {p.step_ms:.2f} ms predicted "
                 f"({_signed(p.step_ms / m.step_ms - 1) if m.step_ms else 'n/a'}): "
                 f"forward compute {m.fw_compute_ms:.2f} vs {p.fw_compute_ms:.2f} ms, "
                 f"backward compute {m.bw_compute_ms:.2f} vs {p.bw_compute_ms:.2f} ms, "
                 f"stalls {m.stall_ms:.2f} ms (forward {m.fw_stall_ms:.2f}) vs {p.stall_ms:.2f} ms"]
        for way in ("d2h", "h2d"):  # the copies' bandwidth against the one planned with
            gbps, planned = getattr(m, f"{way}_gbps", None), self.hardware.get(f"{way}_gbps")
            if gbps:
                parts.append(f"{way.upper()} {nbytes_text(getattr(m, f'{way}_bytes'))} at {gbps:.1f} GB/s"
                             + (f" vs {planned:.1f} planned" if planned else ""))
        if m.host_fw_ms is not None:  # the host's pace against the GPU's
            within = f"{sum(m.host_transfer_ms):.2f} ms in {sum(m.transfer_ops)} transfer ops"
            made = getattr(m, "allocations", None)
            if made:
                within += f"; {made[0]} and {made[1]} device allocations"
            parts.append(f"host issued the forward in {m.host_fw_ms:.2f} ms and the backward in "
                         f"{m.host_bw_ms:.2f} ms ({within})")
        queued = getattr(m, "queued_ms", (None, None))
        if queued[0] is not None:  # the host's head start on each phase
            parts.append(f"GPU work queued when the forward started {queued[0]:.2f} ms, "
                         f"when the backward started {queued[1]:.2f} ms")
        # The kernels call: each phase timed with the GPU held until the host had issued it.
        timed_ahead = [(name, host, ms) for name, host, ms in zip(
            ("forward", "backward"), (m.host_fw_ms, m.host_bw_ms), getattr(m, "ahead_compute_ms", ()))
            if ms is not None]
        if timed_ahead:
            parts.append("with the host ahead: " + ", ".join(f"{name} compute {ms:.2f} ms"
                                                             for name, _, ms in timed_ahead))
        slower = [f"the {name} {host - ms:.2f} ms" for name, host, ms in timed_ahead
                  if host is not None and host > ms]
        if slower:  # without a head start, such a phase takes the host's time, not its kernels'
            parts.append("the host took longer to issue than the kernels ran: " + " and ".join(slower))
        if m.step_peak_bytes is not None:
            parts.append(f"step peak {nbytes_text(m.step_peak_bytes)} measured vs {nbytes_text(p.step_peak_bytes)} "
                         f"predicted ({_signed(p.step_peak_bytes / m.step_peak_bytes - 1) if m.step_peak_bytes else 'n/a'}), "
                         f"in {m.peak_phase or 'n/a'}")
        return f"graph {self.graph_id}: " + "; ".join(parts)

    def predicted_holders(self, most: int = 10) -> list[str]:
        """What the simulated step peak is made of, as the measured ``holders`` are said:
        the activations held there, then the ``most`` largest other tensors live there
        (op, module, source line; where Inductor writes one early, in a kernel fused with
        an earlier op's, which; where its pool holds one past its last read, until which
        op). Empty without a recorded simulation."""
        return peak_holders(self.simulation, most)

    @property
    def activations(self) -> list[DecisionRecord]:
        """The saved values computed in the graph (graph inputs apart)."""
        return [d for d in self.decisions if d.kind == ACTIVATION]

    @property
    def inputs(self) -> list[DecisionRecord]:
        """Parameters, buffers and model inputs (or views of them) saved for backward."""
        return [d for d in self.decisions if d.kind == INPUT]

    @property
    def recomputed(self) -> list[DecisionRecord]:
        return [d for d in self.decisions if d.decision is Decision.RECOMPUTE]

    @property
    def offloaded(self) -> list[DecisionRecord]:
        return [d for d in self.decisions if d.decision is Decision.OFFLOAD]

    @property
    def moves_nothing(self) -> bool:
        """Nothing offloaded and nothing recomputed: the step as Inductor runs it."""
        return not any(d.decision in (Decision.OFFLOAD, Decision.RECOMPUTE) for d in self.decisions)

    @property
    def offloaded_bytes(self) -> int:
        return sum(d.nbytes for d in self.offloaded)

    @property
    def saved_bytes(self) -> int:
        """Bytes of the saved activations (graph inputs are not counted)."""
        return sum(d.nbytes for d in self.activations)

    def summary(self) -> str:
        activations, inputs = self.activations, self.inputs
        kept = len(activations) - len(self.offloaded) - len(self.recomputed)
        if self.off_device:
            devices = sorted({d.device for d in self.decisions})
            return (
                f"graph {self.graph_id}: no activation on an offload device (saved tensors are "
                f"on {', '.join(devices)}); the graph passes through unchanged"
            )
        return (
            f"graph {self.graph_id}: {len(activations)} saved activations "
            f"({nbytes_text(self.saved_bytes)}), {len(self.offloaded)} offloaded "
            f"({nbytes_text(self.offloaded_bytes)}), {len(self.recomputed)} recomputed, {kept} kept"
            + (f" (and {len(inputs)} parameters or inputs saved as they are, "
               f"{nbytes_text(sum(d.nbytes for d in inputs))})" if inputs else "")
            + (
                f"; predicted activation peak {nbytes_text(int(self.predicted.activation_peak_bytes))} "
                f"(was {nbytes_text(int(self.predicted.baseline_activation_peak_bytes))}), step "
                f"{self.predicted.step_ms:.2f} ms (was {self.predicted.baseline_step_ms:.2f} ms)"
                if self.predicted else ""
            )
            + (f"; planned for {sizes_text(self.planned_sizes)}" if self.planned_sizes else "")
            + ("; \"auto\"'s first plan: searched again on the measured step" if self.provisional else "")
            + (" (nothing moved: its measured step is what max_overhead is held against)"
               if self.provisional and self.moves_nothing else "")
            + (f"; {self.note}" if self.note else "")
        )


def sizes_text(sizes: Mapping[str, int]) -> str:
    """``s0=256, s1=257``: symbol values as a plan states them."""
    return ", ".join(f"{name}={value}" for name, value in sizes.items())


def _signed(fraction: float) -> str:
    return f"{fraction * 100:+.1f}%"


def peak_holders(sim: Any, most: int = 10) -> list[str]:
    """What a recorded simulation's (``SimResult``) step peak is made of: the activations
    held there, then the ``most`` largest other tensors live there, in the user's terms
    (``GraphPlan.predicted_holders``). Empty without a recorded simulation."""
    if sim is None or not sim.step_peak_holders or sim.origins is None:
        return []
    activations, *others = sim.step_peak_holders
    out = [f"{nbytes_text(activations)} activations saved for backward (kept, reloaded or recomputed)"]
    for h in others[:most]:
        origin = sim.origins.op(h.op)
        phase = "backward" if sim.origins.in_backward(h.op) else "forward"
        what = (f"{'workspace of ' if h.workspace else ''}{origin.node} ({origin.label}, {phase}"
                + (f", {origin.source})" if origin.source else ")"))
        held = (f", written early with {sim.origins.op(h.first).node}" if h.first < h.op else "")
        held += (f", held in Inductor's pool until {sim.origins.op(h.until).node}"
                 if h.until > h.last else "")
        out.append(f"{nbytes_text(h.nbytes)} {what}{held}")
    return out
