"""Training with Hugging Face Trainer or accelerate: compile the model in place first.

    model = LlamaForCausalLM(config)
    offload_compiler.compile_for_training(model, memory_budget=0.5)   # options checked now
    Trainer(model=model, args=TrainingArguments(...), ...).train()    # or Accelerator().prepare(model, opt)
    offload_compiler.backend_of(model).plans                           # what was decided, per graph

Neither library can select this backend itself: accelerate's ``TorchDynamoPlugin`` (and
Trainer's ``torch_compile_backend``, which goes through it) accepts only the names of its
``DynamoBackend`` enum (``'OFFLOAD' is not a valid DynamoBackend``) and has no way to pass
``options``. A model compiled in place (``nn.Module.compile``) stays an instance of its own
class, so Trainer, ``Accelerator.prepare``, ``save_pretrained`` and state dicts see it as
before (no ``_orig_mod.`` prefix); leave their own compile settings off
(``torch_compile=False``, accelerate's dynamo backend ``"no"``), or they compile it again
with another backend. This module does not import ``transformers``.
"""

from __future__ import annotations

import logging
import weakref
from typing import Any, Mapping

import torch

from ..backend import OffloadBackend, make_backend
from ..config import OffloadConfig

log = logging.getLogger(__name__)

_backends: "weakref.WeakKeyDictionary[torch.nn.Module, OffloadBackend]" = weakref.WeakKeyDictionary()


def compile_for_training(model: torch.nn.Module, config: OffloadConfig | Mapping[str, Any] | None = None,
                         **options: Any) -> torch.nn.Module:
    """Compile ``model`` in place with the offload backend and return it (the same object).

    ``config``: an :class:`OffloadConfig` or a dict of options; or give options as keywords
    (``memory_budget=0.5``). They are checked now: a bad one raises ``ValueError`` naming
    the valid values. The backend, and the plans it makes once training runs, are
    ``backend_of(model)``.
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"compile_for_training takes an nn.Module, not {type(model).__name__}")
    backend = make_backend(config, **options)
    model.compile(backend=backend)
    _backends[model] = backend
    default = OffloadConfig().as_dict()
    log.info("offload: %s compiled in place with the offload backend (%s)", type(model).__name__,
             ", ".join(f"{k}={v!r}" for k, v in backend.config.as_dict().items() if v != default[k])
             or "default options")
    return model


def backend_of(model: torch.nn.Module) -> OffloadBackend:
    """The backend :func:`compile_for_training` compiled ``model`` with (its ``plans``)."""
    try:
        return _backends[model]
    except (KeyError, TypeError):
        raise KeyError(f"this {type(model).__name__} was not compiled by compile_for_training") from None
