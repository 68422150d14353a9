"""Reporting: what the backend decided, for people and tools.

- ``records``: plan records (``GraphPlan``, ``DecisionRecord``, ``Predictions``).
- ``tables``: JSON records, the decision table, the summary.
- ``timeline``: the simulated schedule as a Chrome trace (Perfetto).
- ``plots``: matplotlib plots (memory over the step, the comparison); an optional extra.
- ``graph_text``: readable graph code with transfer annotations.
- ``dump``: one folder per compiled graph.
- ``explain``: trace and plan a model on fake tensors, and report, without running it.
"""
