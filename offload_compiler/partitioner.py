"""The partitioner Inductor (or AOTAutograd) calls with the joint graph.

It runs torch's min-cut partitioner, analyzes the saved activations, plans
(:func:`offload_compiler.planning.plan_graph`), and rewrites: inserts the transfer
nodes, schedules releases and reloads, annotates streams and events, and dumps what
it did. Installed through ``torch._inductor.config.custom_partitioner_fn`` for the
scope of one ``compile_fx`` call, never globally.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import logging
import time
from typing import Any, Callable, Sequence

import torch._dynamo.config as dynamo_config
import torch.fx as fx
from torch._functorch.partitioners import min_cut_rematerialization_partition
from torch.fx._lazy_graph_module import _LazyGraphModule, _get_graph_module_cls, _use_lazy_graph_module
from torch._inductor.custom_graph_pass import CustomPartitionerFn

from passes import (
    analyze_candidates,
    annotate_streams,
    insert_transfers,
    keep_matmuls_early,
    name_saved_values,
    schedule_prefetches,
    schedule_releases,
)
from passes.insert_transfers import use_graph_slots

from passes.schedule_prefetches import NEXT_CALL, link_calls

from . import lowering
from .config import OffloadConfig
from .gc_scope import fewer_collections
from .planning import Partition, PlannedGraph, plan_graph
from .planning import cache
from .planning.budget import warn_if_missed
from .planning.decide import offloads_of
from .planning.limits import unmoved_fits
from .planning.replan import Corrections
from .planning.search import progress, replay
from .reporting import tables, timeline
from .reporting.dump import Dumper, dump_root
from .reporting.records import GraphPlan

log = logging.getLogger("offload_compiler")

_graph_ids = itertools.count()


class OffloadPartitioner(CustomPartitionerFn):
    """Partition, plan and rewrite one joint graph.

    ``cache_key`` (from the backend; ``None``: no plan cache) is where the plan is looked
    up before planning and stored after. ``called`` says whether Inductor called it: on a
    hit of Inductor's own cache it is not, and the backend reports the cached plan with
    :meth:`report_cached`. ``graph_slots``: the graphs will run under CUDA graphs, so the
    transfers take their token form (``passes.insert_transfers.use_graph_slots``).
    ``search=False``: the backend will measure the graph and plan it again, so ``"auto"``
    makes its first plan without searching (``planning.search.plan_graph``).
    """

    def __init__(
        self, config: OffloadConfig, on_plan: Callable[[GraphPlan], None] | None = None,
        cache_key: str | None = None, corrections: Corrections = Corrections(),
        graph_slots: bool = False, search: bool = True,
    ) -> None:
        self.config = config
        self.search = search
        self.on_plan = on_plan
        self.cache_key = cache_key
        self.corrections = corrections
        """Inputs measured on an earlier plan of this graph, and the bytes ``memory_limit``
        leaves the step (``planning/replan.py``)."""
        self.graph_slots = graph_slots
        self.called = False
        self.seconds = 0.0
        """Time spent in this partitioner (min-cut, planning, the rewrite), in seconds."""

    def __call__(
        self, gm: fx.GraphModule, joint_inputs: Sequence[object], **kwargs: Any
    ) -> tuple[fx.GraphModule, fx.GraphModule]:
        t0 = time.perf_counter()
        # Planning makes many short-lived FX objects (a min-cut per "auto" probe), and
        # every full collection they set off walks all that Dynamo and AOTAutograd hold:
        # 2.3 of 8.8 CPU s planning ViT-B/16 at "auto" (benchmarks/RESULTS.md, session
        # 15). The backend's compile holds this scope already; a partitioner called on
        # its own (tests, plan_offline.py) holds it here.
        try:
            with fewer_collections():
                return self._partition_and_plan(gm, joint_inputs, **kwargs)
        finally:
            self.seconds += time.perf_counter() - t0

    def _partition_and_plan(
        self, gm: fx.GraphModule, joint_inputs: Sequence[object], **kwargs: Any
    ) -> tuple[fx.GraphModule, fx.GraphModule]:
        self.called = True
        kwargs.setdefault("compiler", "inductor")
        num_fwd_outputs = kwargs["num_fwd_outputs"]
        graph_id = next(_graph_ids)
        dumper = Dumper(dump_root(self.config.dump_dir), graph_id)
        dumper.joint(gm)

        def analyze(fw: fx.GraphModule, bw: fx.GraphModule) -> list:
            return self._analyze(fw, bw, num_fwd_outputs)

        joint_hash = cache.joint_hash(gm) if self.cache_key else ""
        # Min-cut and each pass ask the graphs they change for new code; Inductor reads
        # it once, after this call (_lazy_modules).
        with _lazy_modules():
            fw_gm, bw_gm = _partition(gm, joint_inputs, kwargs)
            start = Partition(fw_gm, bw_gm, analyze(fw_gm, bw_gm))
            planned = self._replay(gm, start, num_fwd_outputs, joint_hash, graph_id, analyze, dumper)
            fresh = planned is None
            if fresh:
                dumper.stage("partitioned", fw_gm, bw_gm)
                planned = plan_graph(gm, start, num_fwd_outputs, self.config, graph_id, analyze,
                                     self.corrections, self.search)
                if planned.recomputed:
                    dumper.stage("recomputed", planned.fw_gm, planned.bw_gm)
            schedule = _names(planned.release_after), _names(planned.issue_before)
            fw_gm, bw_gm, plan = self._rewrite(planned, num_fwd_outputs, dumper)
        if fresh and self.cache_key:
            cache.store(self.cache_key, cache.CachedPlan(
                joint_hash, planned.recompute_chains, plan, *schedule, dumper.graph_files))
        self._report(plan, dumper)
        return fw_gm, bw_gm

    def _replay(self, gm, start: Partition, num_fwd_outputs: int, joint_hash: str, graph_id: int,
                analyze, dumper) -> PlannedGraph | None:
        """The cached plan for this graph applied without planning, or ``None``."""
        entry = cache.load(self.cache_key) if self.cache_key else None
        if entry is None:
            return None
        if dumper.enabled and not entry.graph_texts:
            return None  # plan afresh, so the dump has every stage (and the entry gets them)
        if entry.joint_hash != joint_hash:
            progress.info("offload: graph %d: the plan cache holds a plan for another joint graph under "
                     "this key; planning afresh", graph_id)
            return None
        plan = entry.plan
        if (plan.provisional and plan.moves_nothing and plan.predicted is not None
                and not unmoved_fits(plan.predicted.baseline_step_peak_bytes,
                                     next((d.device for d in plan.decisions), "cpu"))):
            progress.info("offload: graph %d: the cached plan moves nothing, and that no longer fits "
                          "the device; planning afresh", graph_id)
            return None
        planned = replay(gm, start, num_fwd_outputs, entry.recompute_chains,
                         dataclasses.replace(entry.plan, graph_id=graph_id),
                         entry.release_after, entry.issue_before, analyze)
        if planned is None:
            progress.info("offload: graph %d: the cached plan does not fit this partition; planning "
                     "afresh", graph_id)
            return None
        progress.info("offload: graph %d: plan taken from the plan cache (no planning)", graph_id)
        dumper.replay(entry.graph_texts)  # the stages as the compile that planned wrote them
        return planned

    def _rewrite(self, planned: PlannedGraph, num_fwd_outputs: int, dumper: Dumper):
        fw_gm, bw_gm, plan = planned.fw_gm, planned.bw_gm, planned.plan
        insert_transfers(fw_gm, bw_gm, num_fwd_outputs, offloads_of(plan))
        dumper.stage("transfers", fw_gm, bw_gm)
        if planned.release_after is not None:
            schedule_releases(fw_gm, planned.release_after)
        schedule_prefetches(bw_gm, self.config.prefetch_depth, planned.issue_before)
        if self.config.per_block:
            link_calls(fw_gm, bw_gm, (planned.issue_before or {}).get(NEXT_CALL))
        annotate_streams(fw_gm, bw_gm)
        lowering.plan_pool(bw_gm, getattr(plan.simulation, "bw_pool_bytes", None))
        plan.fw_graph, plan.bw_graph = fw_gm, bw_gm
        dumper.stage("scheduled", fw_gm, bw_gm)
        if self.graph_slots:
            use_graph_slots(fw_gm, bw_gm)
            dumper.stage("graph_slots", fw_gm, bw_gm)
        return fw_gm, bw_gm, plan

    def report_cached(self) -> GraphPlan | None:
        """Inductor's cache held the compiled graphs and this partitioner was not called:
        report the plan they were compiled with, from the plan cache, as a cold compile
        would (plan record, log line, dump, trace artifact)."""
        entry = cache.load(self.cache_key) if self.cache_key else None
        if entry is None:
            log.debug("offload: no partition and no cached plan for this graph (no backward "
                      "needed, or Inductor's cache held it and the plan cache was cleared)")
            return None
        plan = dataclasses.replace(entry.plan, graph_id=next(_graph_ids))
        dumper = Dumper(dump_root(self.config.dump_dir), plan.graph_id)
        dumper.replay(entry.graph_texts)
        progress.info("offload: graph %d: compiled graphs from Inductor's cache, plan from the plan "
                 "cache", plan.graph_id)
        self._report(plan, dumper)
        return plan

    def _report(self, plan: GraphPlan, dumper: Dumper) -> None:
        dumper.plan(plan, self.config)
        plan.dump_folder = str(dumper.folder) if dumper.enabled else None
        _trace_artifact(plan, self.config)
        log.info("offload: %s", plan.summary())
        warn_if_missed(plan, self.config.memory_budget)
        for d in plan.decisions:
            log.debug("offload: graph %d: %s %s (%d bytes): %s",
                      plan.graph_id, d.decision.value, d.name, d.nbytes, d.reason)
        if self.on_plan is not None:
            self.on_plan(plan)

    def _analyze(self, fw_gm, bw_gm, num_fwd_outputs):
        return analyze_candidates(
            fw_gm, bw_gm, num_fwd_outputs,
            devices=self.config.devices, min_offload_bytes=self.config.min_offload_bytes,
        )

    def uuid(self) -> str:
        """Changes with the config and with the code of this package and of ``passes``."""
        corrections = hashlib.sha256(self.corrections.key().encode()).hexdigest()[:16]
        slots = "-slots" if self.graph_slots else ""
        unsearched = "" if self.search else "-unsearched"
        return f"offload-{cache.source_hash()}-{self.config.fingerprint()}-{corrections}{slots}{unsearched}"

    # Inductor deep-copies its config (``save_config_portable``) and pickles the copy into
    # the key of its FX graph cache, for the forward and again for the backward; this
    # partitioner is in that config. Copied and pickled as it is, that took along
    # everything it reaches: ``on_plan``, the backend's plans, their graph modules
    # (each pickle recompiles a GraphModule's code) and timelines. On the example GPT's
    # ``h100`` preset on an H100 that was 1.7 s per key (under a profiler), and it grows
    # with every graph the backend has planned. What the key needs of it is its
    # identity, :meth:`uuid`.
    def __deepcopy__(self, memo: dict) -> OffloadPartitioner:
        return self

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return _PickledPartitioner, (self.uuid(),)


class _PickledPartitioner(CustomPartitionerFn):
    """What a pickled :class:`OffloadPartitioner` becomes: its :meth:`uuid`, enough for a
    cache key; it cannot partition (the planner's state stays in the process that
    compiled)."""

    def __init__(self, uuid: str) -> None:
        self._uuid = uuid

    def uuid(self) -> str:
        return self._uuid

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("an offload partitioner rebuilt from a pickle cannot partition: "
                           "compile in the process that created it")


def _partition(joint_gm: fx.GraphModule, joint_inputs, kwargs) -> tuple[fx.GraphModule, fx.GraphModule]:
    """Min-cut's partition, each saved value named as the placeholder that receives it
    (``passes.name_saved_values``), with backward's matmuls kept where they are
    (``passes.keep_matmuls_early``)."""
    fw_gm, bw_gm = min_cut_rematerialization_partition(joint_gm, joint_inputs, **kwargs)
    fw_gm, bw_gm = _as_lazy(fw_gm), _as_lazy(bw_gm)
    name_saved_values(joint_gm, fw_gm, bw_gm, kwargs["num_fwd_outputs"])
    keep_matmuls_early(bw_gm)
    return fw_gm, bw_gm


def _names(nodes: dict[str, fx.Node] | None) -> dict[str, str] | None:
    return None if nodes is None else {k: n.name for k, n in nodes.items()}


def _trace_artifact(plan: GraphPlan, config: OffloadConfig) -> None:
    """The plan and its simulated timeline as structured trace artifacts, for TORCH_TRACE /
    tlparse users: ``offload_plan_graph_N`` (``plan.json``'s record) and
    ``offload_timeline_graph_N`` (``timeline.json``'s Chrome trace, for Perfetto). Built
    only when tracing is on (``trace_structured`` calls ``payload_fn`` only then)."""
    try:
        from torch._logging import trace_structured
    except ImportError:  # pragma: no cover
        return
    trace_structured(
        "artifact",
        metadata_fn=lambda: {"name": f"offload_plan_graph_{plan.graph_id}", "encoding": "json"},
        payload_fn=lambda: tables.to_json(tables.plan_dict(plan, config)),
    )
    if plan.simulation is not None:
        trace_structured(
            "artifact",
            metadata_fn=lambda: {"name": f"offload_timeline_graph_{plan.graph_id}", "encoding": "json"},
            payload_fn=lambda: timeline.trace_json(timeline.chrome_trace(plan)),
        )


def _as_lazy(gm: fx.GraphModule) -> fx.GraphModule:
    """``gm``, or within :func:`_lazy_modules` a lazy module over its graph where it is
    not one (min-cut builds its backward as a plain module, which each pass that
    changes the graph would ask for new code)."""
    if isinstance(gm, _LazyGraphModule) or _get_graph_module_cls() is not _LazyGraphModule:
        return gm
    lazy = _LazyGraphModule(gm, gm.graph)
    lazy.meta.update(gm.meta)
    return lazy


def _lazy_modules():
    """A scope in which the graph modules min-cut and the offload passes make generate
    their Python code when it is first read (``torch.fx``'s lazy modules), not each
    time their graph changes: regenerating a large graph's code takes a tenth of a
    second (HF Llama), and Inductor reads it once, for its cache key. What
    ``torch.compile`` and Inductor do, with Dynamo's ``use_lazy_graph_module`` (off:
    each change generates the code)."""
    return _use_lazy_graph_module(dynamo_config.use_lazy_graph_module)
