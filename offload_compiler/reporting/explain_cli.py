"""``python -m offload_compiler explain module:factory``: what the backend would decide for a
model, planned on fake tensors (nothing runs, no GPU needed).

``factory`` is a function of no arguments, found as ``package.module:name`` (importable
from the current folder) or ``path/to/file.py:name``, that returns ``(model, inputs)``;
``inputs`` is one of

- a tuple (or list) of positional inputs: ``(model, (x,))``; a lone tensor counts as ``(x,)``;
- a dict of keyword inputs: ``(model, {"input_ids": ids, "labels": ids})``;
- ``(args, kwargs)``: a tuple or list, then a dict: ``(model, ((x,), {"mask": m}))``.

The factory may build the model on the meta device (``with torch.device("meta"):``) so
no weight is allocated; the planner puts every tensor on ``--device``.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any, Callable

import torch

from .. import offline
from ..config import OffloadConfig
from ..planning.replan import MemoryLimitError
from .explain import plan_offline

DEFAULT_TOP = 20


def add_explain_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``explain`` command; its handler is ``args.handler``."""
    p = subparsers.add_parser(
        "explain", help="plan a model from a factory without running it, and print the decisions",
        description=__doc__.split("\n\n")[0].split(": ", 1)[1],
        epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("factory", help="module:function or file.py:function returning (model, inputs)")
    p.add_argument("--budget", default="auto",
                   help='memory_budget: "auto", a fraction in (0, 1], or bytes with a unit (default: auto)')
    p.add_argument("--device", default="cuda", choices=offline.DEVICES,
                   help="the device to plan for; cuda on a machine without CUDA plans in loopback on "
                        "the CPU with --profile (default: cuda)")
    p.add_argument("--profile", default=None,
                   help=f"hardware profile: {' or '.join(sorted(offline.PROFILES))}, or a JSON file of its "
                        "fields (default: the device's own; h100 for cuda on a machine without CUDA)")
    p.add_argument("--top", type=_rows, default=DEFAULT_TOP,
                   help=f"rows per table section, 0 for all (default: {DEFAULT_TOP})")
    p.add_argument("--options", default="{}", type=_json_object,
                   help='further options as JSON, e.g. \'{"max_overhead": 0.05}\' (default: {})')
    p.set_defaults(handler=functools.partial(main_explain, parser=p))
    return p


def main_explain(args: argparse.Namespace, parser: argparse.ArgumentParser | None = None) -> int:
    """Print the plan; exit 2 (``parser.error``) for a bad factory, inputs or option."""
    fail = parser.error if parser is not None else _exit_usage
    try:
        factory = load_factory(args.factory)
        model, inputs = _call(factory, args.factory)
        call_args, call_kwargs = split_inputs(inputs)
        options = {**args.options, "memory_budget": _budget(args.budget)}
        OffloadConfig.from_options(options)  # a bad option is a usage error, said before tracing
        if args.profile is not None:
            offline.load_profile(args.profile)  # a bad profile is a usage error, said before tracing
    except ValueError as error:
        return fail(str(error))
    print(f"explain: tracing and planning {args.factory} on fake tensors (nothing runs)...",
          file=sys.stderr, flush=True)
    try:
        report = plan_offline(model, *call_args, device=args.device, profile=args.profile,
                              options=options, top=args.top or None, **call_kwargs)
    except ValueError as error:  # an option the configuration refuses
        return fail(str(error))
    except MemoryLimitError as error:  # no plan meets memory_limit: said, not a traceback
        print(f"explain: {error}", file=sys.stderr)
        return 1
    print(report)
    return 0


def load_factory(spec: str) -> Callable[[], Any]:
    """The function ``spec`` names: ``package.module:name`` or ``path/file.py:name``."""
    where, sep, name = spec.rpartition(":")
    if not sep or not where or not name:
        raise ValueError(f"factory {spec!r} is not module:function (e.g. mypkg.models:make or models.py:make)")
    if where.endswith(".py"):
        path = Path(where)
        if not path.is_file():
            raise ValueError(f"factory {spec!r}: no file {path}")
        loaded = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(loaded)
        sys.modules.setdefault(path.stem, module)
        loaded.loader.exec_module(module)
    else:
        if "" not in sys.path and "." not in sys.path:
            sys.path.insert(0, "")  # modules of the current folder, as python -m finds them
        try:
            module = importlib.import_module(where)
        except ImportError as error:
            raise ValueError(f"factory {spec!r}: cannot import {where} ({error})") from None
    factory = getattr(module, name, None)
    if not callable(factory):
        raise ValueError(f"factory {spec!r}: {where} has no function {name}")
    return factory


def split_inputs(inputs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``(args, kwargs)`` from what a factory returned as inputs (see the module's doc)."""
    if isinstance(inputs, torch.Tensor):
        return (inputs,), {}
    if isinstance(inputs, dict):
        return (), _keywords(inputs)
    if isinstance(inputs, (tuple, list)):
        if len(inputs) == 2 and isinstance(inputs[0], (tuple, list)) and isinstance(inputs[1], dict):
            return tuple(inputs[0]), _keywords(inputs[1])
        return tuple(inputs), {}
    raise ValueError(f"the factory's inputs are a {type(inputs).__name__}; give a tuple of positional "
                     "inputs, a dict of keyword inputs, or (args, kwargs)")


def _keywords(d: dict[Any, Any]) -> dict[str, Any]:
    bad = [k for k in d if not isinstance(k, str)]
    if bad:
        raise ValueError(f"keyword inputs must be named by strings; got keys {bad!r}")
    return dict(d)


def _call(factory: Callable[[], Any], spec: str) -> tuple[torch.nn.Module, Any]:
    out = factory()
    if not (isinstance(out, (tuple, list)) and len(out) == 2 and isinstance(out[0], torch.nn.Module)):
        raise ValueError(f"factory {spec!r} returned {type(out).__name__}; it must return (model, inputs) "
                         "with model an nn.Module")
    return out[0], out[1]


def _budget(text: str) -> Any:
    if text == "auto":
        return text
    try:
        return float(text)
    except ValueError:
        return text  # bytes with a unit ("12GiB"): the configuration reads it, or says what is wrong


def _rows(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of rows; give 0 (all) or more")
    return n


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise argparse.ArgumentTypeError(f"not JSON ({error})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("give a JSON object of options, e.g. '{\"max_overhead\": 0.05}'")
    return value


def _exit_usage(message: str) -> int:
    print(f"python -m offload_compiler explain: error: {message}", file=sys.stderr)
    return 2
