"""The partitioner Inductor (or AOTAutograd) calls with the joint graph.

It runs torch's min-cut partitioner, then the passes: analyze the saved activations,
choose what to offload, insert the transfer nodes, schedule the reloads, annotate
streams and events. Installed through ``torch._inductor.config.custom_partitioner_fn``
for the scope of one ``compile_fx`` call, never globally.
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
    schedule_prefetches,
)

from .config import OffloadConfig
from .plan import GraphPlan, choose, offloads_of

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
        fw_gm, bw_gm = min_cut_rematerialization_partition(gm, joint_inputs, **kwargs)
        graph_id = next(_graph_ids)
        candidates = analyze_candidates(
            fw_gm,
            bw_gm,
            num_fwd_outputs,
            devices=self.config.devices,
            min_offload_bytes=self.config.min_offload_bytes,
        )
        plan = choose(candidates, self.config, graph_id)
        insert_transfers(fw_gm, bw_gm, num_fwd_outputs, offloads_of(plan))
        schedule_prefetches(bw_gm, self.config.prefetch_depth)
        annotate_streams(fw_gm, bw_gm)
        plan.fw_graph, plan.bw_graph = fw_gm, bw_gm
        log.info("offload: %s", plan.summary())
        for d in plan.decisions:
            log.debug("offload: graph %d: %s %s (%d bytes): %s",
                      graph_id, d.decision.value, d.name, d.nbytes, d.reason)
        if self.on_plan is not None:
            self.on_plan(plan)
        return fw_gm, bw_gm

    def uuid(self) -> str:
        """Changes with the config and with the code of this package and of ``passes``."""
        return f"offload-{_source_hash()}-{self.config.fingerprint()}"
