"""The ``compare`` command line: arguments checked as they are parsed (a bad one exits
with status 2 and a message, not a traceback), defaults in ``--help``, each row said on
stderr as it starts and ends, and an exit status that says whether the rows agree."""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
from typing import Any

from .harness import CACHES, check_strategy, compare, table
from .distributed import KINDS
from .run import COMPILE_MODES, DTYPES, STRATEGY_HELP, Row, fraction

log = logging.getLogger(__name__)

#: Exit status of ``compare`` (also in ``--help``).
EXIT_OK, EXIT_NOTHING_RAN, EXIT_BAD_ARGUMENTS, EXIT_DISAGREE = 0, 1, 2, 3
EXIT_CODES = f"""exit status:
  {EXIT_OK}  every row that ran agrees with the reference row on the first step's loss and
     gradient norm (rows that failed, ran out of memory, timed out or are unsupported
     are in the table with their status)
  {EXIT_NOTHING_RAN}  no row ran
  {EXIT_BAD_ARGUMENTS}  bad arguments
  {EXIT_DISAGREE}  rows disagree on the first step's loss or gradient norm (column "agrees")"""


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults in ``--help`` (not for options whose default is ``None``: their help says
    what happens), epilogs as written."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)


def _arg_type(check):
    """An argparse ``type`` from a function raising ``ValueError``: the message, not a
    traceback, and exit status 2."""
    def convert(text: str):
        try:
            return check(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
    convert.__name__ = check.__name__
    return convert


def _budgets(text: str) -> tuple[float, ...]:
    parts = [t for t in text.split(",") if t.strip()]
    if not parts:
        raise ValueError("give at least one fraction, e.g. 0.5,0.2")
    return tuple(fraction(t) for t in parts)


def _strategies(text: str) -> list[str]:
    return [check_strategy(t.strip()) for t in text.split(",") if t.strip()]


def _device(text: str) -> str:
    import torch

    try:
        kind = torch.device(text).type
    except RuntimeError:
        kind = None
    if kind not in ("cpu", "cuda"):
        raise ValueError(f"{text!r} is not a device this harness runs on; give cpu, cuda or cuda:N")
    return text


def _model(text: str) -> str:
    module, _, factory = text.partition(":")
    if not module or not factory:
        raise ValueError(f"{text!r}: give module:factory, a function returning (model, batch)")
    return text


def _count(least: int):
    def count(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < least:
            raise ValueError(f"{text!r} is not an integer >= {least}")
        return value
    count.__name__ = f"integer >= {least}"
    return count


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{text!r} is not a positive number of seconds")
    return value


def _offload_options(text: str) -> dict[str, Any]:
    from ..config import OffloadConfig

    try:
        options = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"not JSON ({error}): {text!r}") from None
    if not isinstance(options, dict):
        raise ValueError(f"give a JSON object of options, e.g. '{{\"copy_margin\": 0.1}}', not {text!r}")
    fixed = sorted({"memory_budget", "devices"} & set(options))
    if fixed:
        raise ValueError(f"may not set {fixed}: the strategy name sets them (offload:0.5, --device)")
    OffloadConfig.from_options(options)
    return options


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ..models.gpt import PRESETS

    p.formatter_class = HelpFormatter
    p.epilog = EXIT_CODES
    src = p.add_mutually_exclusive_group()
    src.add_argument("--preset", default="tiny", choices=sorted(PRESETS), help="example GPT preset")
    src.add_argument("--model", default=None, type=_arg_type(_model),
                     help="module:factory, a function returning (model, batch), instead of --preset")
    p.add_argument("--device", default="cpu", type=_arg_type(_device), help="cpu, cuda or cuda:N")
    p.add_argument("--dtype", default=None, choices=DTYPES,
                   help="parameter dtype (default: float32 on CPU, bfloat16 on CUDA)")
    p.add_argument("--steps", type=_arg_type(_count(1)), default=5, help="timed steps per strategy")
    p.add_argument("--warmup", type=_arg_type(_count(0)), default=2,
                   help="untimed steps after the first (compiling) one")
    p.add_argument("--budgets", type=_arg_type(_budgets), default="0.5,0.2",
                   help="comma-separated fractions in (0, 1] for the budget:B and offload:B rows "
                        "(1.0, not 1: a whole number is refused)")
    p.add_argument("--strategies", type=_arg_type(_strategies), default=None,
                   help=f"comma-separated subset of: {STRATEGY_HELP} (default: all; offload:B takes "
                        "auto, a fraction or bytes with a unit, e.g. offload:12GiB)")
    p.add_argument("--blocks", default=None,
                   help="dotted path of the ModuleList of repeated blocks (default: the largest)")
    p.add_argument("--out", default=None, help="folder for compare.json, compare.png, compare.txt "
                   "and one log per strategy (default: none written)")
    p.add_argument("--timeout", type=_arg_type(_seconds), default=1800, help="seconds per strategy")
    p.add_argument("--offload-options", type=_arg_type(_offload_options), default=None,
                   help='extra OffloadConfig options for the offload:* strategies, as a JSON object, '
                        'e.g. \'{"node_costs": "profile"}\'')
    p.add_argument("--compile", default="whole", choices=COMPILE_MODES,
                   help="compile the whole model, or each block on its own (as torchtitan)")
    p.add_argument("--distributed", default=None, choices=KINDS,
                   help="run each strategy under DDP or FSDP2 on --nproc processes (rank 0 reports)")
    p.add_argument("--nproc", type=_arg_type(_count(1)), default=2,
                   help="processes with --distributed (one GPU each)")
    p.add_argument("--caches", default="cold", choices=CACHES,
                   help="cold: each row compiles with an empty Inductor cache and an empty plan cache, so "
                        "the first-step column is a first compile; warm: the caches as they are")


def exit_code(rows: list[Row]) -> int:
    """``EXIT_DISAGREE`` if rows disagree, ``EXIT_NOTHING_RAN`` if none ran, else ``EXIT_OK``."""
    if not any(r.status == "ok" for r in rows):
        return EXIT_NOTHING_RAN
    if any(r.agrees.startswith("NO") for r in rows):
        return EXIT_DISAGREE
    return EXIT_OK


def main_compare(args: argparse.Namespace) -> int:
    """The command: rows on stderr as they start and end, the table on stdout; returns
    the exit status (``EXIT_CODES``)."""
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    dtype = args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32")
    rows = compare(preset=None if args.model else args.preset, model=args.model, device=args.device,
                   dtype=dtype, steps=args.steps, warmup=args.warmup, budgets=args.budgets,
                   strategies=args.strategies, blocks=args.blocks, out=args.out, timeout_s=args.timeout,
                   offload_options=args.offload_options, compile_mode=args.compile,
                   distributed=args.distributed, nproc=args.nproc, caches=args.caches)
    print(table(rows))
    code = exit_code(rows)
    if code == EXIT_DISAGREE:
        log.error("compare: rows disagree on the first step's loss or gradient norm: %s (exit %d)",
                  ", ".join(f"{r.strategy} {r.agrees}" for r in rows if r.agrees.startswith("NO")), code)
    elif code == EXIT_NOTHING_RAN:
        log.error("compare: no strategy ran; see the note column%s (exit %d)",
                  f" and the logs in {args.out}" if args.out else "", code)
    return code
