"""Reporting: what the backend decided, for people and tools.

- ``records``: plan records (``GraphPlan``, ``DecisionRecord``, ``Predictions``).
- ``tables``: JSON records, the decision table, the summary.
- ``timeline``: the simulated schedule as a Chrome trace and a memory plot.
- ``graph_text``: readable graph code with transfer annotations.
- ``dump``: one folder per compiled graph.
- ``explain``: trace and plan a model on fake tensors, and report, without running it.
"""
