"""The partitioner Inductor (or AOTAutograd) calls with the joint graph.

It runs torch's min-cut partitioner, analyzes the saved activations, plans
(:func:`offload_compiler.planning.plan_graph`), and rewrites: inserts the transfer
nodes, schedules releases and reloads, annotates streams and events, and dumps what
it did. Installed through ``torch._inductor.config.custom_partitioner_fn`` for the
scope of one ``compile_fx`` call, never globally.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
from pathlib import Path
from typing import Any, Callable, Sequence

import torch.fx as fx
from torch._functorch.partitioners import min_cut_rematerialization_partition
from torch._inductor.custom_graph_pass import CustomPartitionerFn

from passes import (
    analyze_candidates,
    annotate_streams,
    insert_transfers,
    keep_matmuls_early,
    schedule_prefetches,
    schedule_releases,
)

from .config import OffloadConfig
from .planning import Partition, plan_graph
from .planning.decide import offloads_of
from .reporting import tables
from .reporting.dump import Dumper, dump_root
from .reporting.records import GraphPlan

log = logging.getLogger("offload_compiler")

_graph_ids = itertools.count()


def _source_hash() -> str:
    root = Path(__file__).resolve().parent
    files = sorted([*root.rglob("*.py"), *(root.parent / "passes").rglob("*.py")])
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.read_bytes())
    return digest.hexdigest()[:16]


class OffloadPartitioner(CustomPartitionerFn):
    def __init__(
        self, config: OffloadConfig, on_plan: Callable[[GraphPlan], None] | None = None
    ) -> None:
        self.config = config
        self.on_plan = on_plan

    def __call__(
        self, gm: fx.GraphModule, joint_inputs: Sequence[object], **kwargs: Any
    ) -> tuple[fx.GraphModule, fx.GraphModule]:
        kwargs.setdefault("compiler", "inductor")
        num_fwd_outputs = kwargs["num_fwd_outputs"]
        graph_id = next(_graph_ids)
        dumper = Dumper(dump_root(self.config.dump_dir), graph_id)
        dumper.joint(gm)

        def repartition() -> tuple[fx.GraphModule, fx.GraphModule, list]:
            fw, bw = _partition(gm, joint_inputs, kwargs)
            return fw, bw, self._analyze(fw, bw, num_fwd_outputs)

        fw_gm, bw_gm, candidates = repartition()
        dumper.stage("partitioned", fw_gm, bw_gm)
        planned = plan_graph(gm, Partition(fw_gm, bw_gm, candidates), num_fwd_outputs,
                             self.config, graph_id, repartition)
        fw_gm, bw_gm, plan = planned.fw_gm, planned.bw_gm, planned.plan
        if planned.recomputed:
            dumper.stage("recomputed", fw_gm, bw_gm)
        insert_transfers(fw_gm, bw_gm, num_fwd_outputs, offloads_of(plan))
        dumper.stage("transfers", fw_gm, bw_gm)
        if planned.release_after is not None:
            schedule_releases(fw_gm, planned.release_after)
        schedule_prefetches(bw_gm, self.config.prefetch_depth, planned.issue_before)
        annotate_streams(fw_gm, bw_gm)
        plan.fw_graph, plan.bw_graph = fw_gm, bw_gm
        dumper.stage("scheduled", fw_gm, bw_gm)
        dumper.plan(plan, self.config)
        plan.dump_folder = str(dumper.folder) if dumper.enabled else None
        _trace_artifact(plan, self.config)
        log.info("offload: %s", plan.summary())
        for d in plan.decisions:
            log.debug("offload: graph %d: %s %s (%d bytes): %s",
                      graph_id, d.decision.value, d.name, d.nbytes, d.reason)
        if self.on_plan is not None:
            self.on_plan(plan)
        return fw_gm, bw_gm

    def _analyze(self, fw_gm, bw_gm, num_fwd_outputs):
        return analyze_candidates(
            fw_gm, bw_gm, num_fwd_outputs,
            devices=self.config.devices, min_offload_bytes=self.config.min_offload_bytes,
        )

    def uuid(self) -> str:
        """Changes with the config and with the code of this package and of ``passes``."""
        return f"offload-{_source_hash()}-{self.config.fingerprint()}"


def _partition(joint_gm: fx.GraphModule, joint_inputs, kwargs) -> tuple[fx.GraphModule, fx.GraphModule]:
    """Min-cut's partition, with backward's matmuls kept where they are
    (``passes.keep_matmuls_early``)."""
    fw_gm, bw_gm = min_cut_rematerialization_partition(joint_gm, joint_inputs, **kwargs)
    keep_matmuls_early(bw_gm)
    return fw_gm, bw_gm


def _trace_artifact(plan: GraphPlan, config: OffloadConfig) -> None:
    """The plan as a structured trace artifact, for TORCH_TRACE / tlparse users."""
    try:
        from torch._logging import trace_structured
    except ImportError:  # pragma: no cover
        return
    trace_structured(
        "artifact",
        metadata_fn=lambda: {"name": f"offload_plan_graph_{plan.graph_id}", "encoding": "json"},
        payload_fn=lambda: tables.to_json(tables.plan_dict(plan, config)),
    )
