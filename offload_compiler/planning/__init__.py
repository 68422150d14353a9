"""Planning: from partitioned graphs to KEEP / OFFLOAD / RECOMPUTE and a schedule.

- ``hardware``: the device profile (bandwidths, rates), calibrated once per GPU.
- ``costs``: node run times from FLOPs and bytes on that profile.
- ``liveness``: when each tensor is written and last read, as Inductor will run it.
- ``simulator`` (with ``step_peak``): the step as three lanes (compute, D2H, H2D) and
  the memory held over time.
- ``solver``: the choice per tensor for a budget, on plain lists (no FX).
- ``facts``: what the simulator and solver need, read off a partition.
- ``budget``, ``decide``: the budget settled once; decisions as plan records.
- ``search``: the planning loop behind one entry point, :func:`plan_graph`.
"""

from .search import Partition, PlannedGraph, plan_graph

__all__ = ["Partition", "PlannedGraph", "plan_graph"]
