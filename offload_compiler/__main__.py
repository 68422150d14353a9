"""Command line: ``python -m offload_compiler compare ...``."""

from __future__ import annotations

import argparse
import sys

from . import compare


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m offload_compiler")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("compare", help="run a model under every memory strategy, side by side")
    compare.add_arguments(p)
    args = parser.parse_args(argv)
    if args.command == "compare":
        return compare.main_compare(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
