"""Compare the offload backend with checkpointing and PyTorch's own strategies, on a model.

``harness`` runs every strategy, each in a process of its own, and writes the table
and files; ``run`` runs and measures one strategy; ``cli`` is the command line.
"""

from .cli import add_arguments, exit_code, main_compare
from .harness import compare, pareto, strategies_for, table, write_outputs
from .run import Row, find_blocks, load_model, run_strategy, setup_strategy, wrap_blocks

__all__ = ["Row", "add_arguments", "compare", "exit_code", "find_blocks", "load_model", "main_compare", "pareto",
           "run_strategy", "setup_strategy", "strategies_for", "table", "write_outputs", "wrap_blocks"]
