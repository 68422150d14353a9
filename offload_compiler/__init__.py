"""offload_compiler: a ``torch.compile`` backend that moves saved activations to host memory.

    model = torch.compile(model, backend="offload", options={"policy": "all"})

Importing the package registers the ``offload`` backend name (the installed package
also registers it through the ``torch_dynamo_backends`` entry point).
"""

from .backend import OffloadBackend, make_backend, offload_backend, register
from .config import OffloadConfig
from .decision import Decision
from .integrations.huggingface import backend_of, compile_for_training
from .reporting.explain import Report, explain, plan_offline
from .reporting.graph_text import graph_text
from .reporting.records import DecisionRecord, GraphPlan, Predictions
from .runtime import empty_host_pool, host_pool

register()

__all__ = [
    "Decision",
    "DecisionRecord",
    "GraphPlan",
    "OffloadBackend",
    "OffloadConfig",
    "Predictions",
    "Report",
    "backend_of",
    "compile_for_training",
    "empty_host_pool",
    "explain",
    "graph_text",
    "host_pool",
    "make_backend",
    "offload_backend",
    "plan_offline",
]
