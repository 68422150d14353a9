"""Planning: from partitioned graphs to KEEP / OFFLOAD / RECOMPUTE and a schedule.

- ``hardware``: the device profile (bandwidths, rates), calibrated once per GPU.
- ``costs``: node run times from FLOPs and bytes on that profile; ``sizes``: the sizes a
  graph with symbolic shapes is planned at.
- ``liveness``: when each tensor is written and last read, as Inductor will run it.
- ``simulator`` (with ``step_peak`` and ``copy_lanes``: when copies run, are released
  and are issued): the step as three lanes (compute, D2H, H2D) and the host issuing
  them, and the memory held over time.
- ``solver``: the choice per tensor for a budget, on plain lists (no FX).
- ``facts``: what the simulator and solver need, read off a partition.
- ``budget``, ``decide``: the budget settled once; decisions as plan records.
- ``search``: the planning loop behind one entry point, :func:`plan_graph`; ``reuse``:
  what its ``"auto"`` probes share (min-cut partitions, facts, simulations).
- ``limits``, ``replan``, ``cache``: ``memory_limit``, planning again from a
  measurement, the plan cache.
"""

from .search import Partition, PlannedGraph, plan_graph

__all__ = ["Partition", "PlannedGraph", "plan_graph"]
