"""offload_compiler: a ``torch.compile`` backend that moves saved activations to host memory.

    model = torch.compile(model, backend="offload", options={"policy": "all"})

Importing the package registers the ``offload`` backend name (the installed package
also registers it through the ``torch_dynamo_backends`` entry point).
"""

from .backend import OffloadBackend, make_backend, offload_backend, register
from .config import OffloadConfig
from .explain import Report, explain
from .inspect import graph_text
from .plan import Decision, DecisionRecord, GraphPlan
from .runtime import host_pool

register()

__all__ = [
    "Decision",
    "DecisionRecord",
    "GraphPlan",
    "OffloadBackend",
    "OffloadConfig",
    "Report",
    "explain",
    "graph_text",
    "host_pool",
    "make_backend",
    "offload_backend",
]
