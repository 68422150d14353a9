"""Command line: ``python -m offload_compiler compare ...``, ``... inspect DUMP_DIR`` and
``... explain module:factory``."""

from __future__ import annotations

import argparse
import sys

from . import compare
from .reporting import inspect_dump
from .reporting.explain_cli import add_explain_parser


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m offload_compiler")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("compare", help="run a model under every memory strategy, side by side")
    compare.add_arguments(p)
    q = sub.add_parser("inspect", help="print the summary and decisions of every graph in a dump")
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
