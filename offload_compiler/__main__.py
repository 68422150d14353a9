"""Command line: ``python -m offload_compiler compare ...``, ``... inspect DUMP_DIR`` and
``... explain module:factory`` (installed as ``offload-compiler``). Bad arguments exit with
status 2; ``compare``'s other exit statuses are in its ``--help``."""

from __future__ import annotations

import argparse
import sys

from . import compare
from ._version import __version__
from .compare.cli import HelpFormatter
from .reporting import inspect_dump
from .reporting.explain_cli import add_explain_parser


def version_text() -> str:
    """``offload_compiler 0.1.0 (torch 2.13.0, Python 3.11.7)``: what ``--version`` prints."""
    import platform

    import torch

    return f"offload_compiler {__version__} (torch {torch.__version__}, Python {platform.python_version()})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m offload_compiler", formatter_class=HelpFormatter,
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=version_text())
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("compare", help="run a model under every memory strategy, side by side")
    compare.add_arguments(p)
    q = sub.add_parser("inspect", help="print the summary and decisions of every graph in a dump",
                       formatter_class=HelpFormatter)
    inspect_dump.add_arguments(q)
    add_explain_parser(sub)
    args = parser.parse_args(argv)
    if args.command == "explain":
        return args.handler(args)
    if args.command == "compare":
        return compare.main_compare(args)
    return inspect_dump.main_inspect(args)


if __name__ == "__main__":
    sys.exit(main())
