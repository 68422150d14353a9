"""offload_compiler: a ``torch.compile`` backend that moves saved activations to host memory.

    model = torch.compile(model, backend="offload", options={"policy": "all"})

Importing the package registers the ``offload`` backend name (the installed package
also registers it through the ``torch_dynamo_backends`` entry point) and the
``TORCH_LOGS`` name ``offload`` (``_logging.py``), and warns once on a torch outside the
tested range (``_version.TESTED_TORCH``).
"""

from ._logging import import_torch

import_torch()  # before anything imports torch: TORCH_LOGS=offload must not stop it

import torch  # noqa: E402

from ._version import SCHEMA_VERSION, __version__, warn_on_untested_torch  # noqa: E402
from .backend import OffloadBackend, make_backend, offload_backend, register  # noqa: E402
from .config import ByteSize, OffloadConfig  # noqa: E402
from .decision import Decision  # noqa: E402
from .integrations.huggingface import backend_of, compile_for_training  # noqa: E402
from .reporting.explain import Report, explain, plan_offline  # noqa: E402
from .reporting.graph_text import graph_text  # noqa: E402
from .reporting.records import DecisionRecord, GraphPlan, Predictions  # noqa: E402
from .runtime import empty_host_pool, host_pool  # noqa: E402

warn_on_untested_torch(torch.__version__)
register()

__all__ = [
    "ByteSize",
    "Decision",
    "DecisionRecord",
    "GraphPlan",
    "OffloadBackend",
    "OffloadConfig",
    "Predictions",
    "Report",
    "SCHEMA_VERSION",
    "__version__",
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
