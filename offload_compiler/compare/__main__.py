"""``python -m offload_compiler.compare``: the harness, or (``--worker SPEC``) one strategy."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from dataclasses import asdict

from .cli import add_arguments, main_compare
from .run import run_strategy


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 2 and argv[0] == "--worker":
        # The row's log (stderr, kept as OUT/<strategy>.log): the backend's INFO lines,
        # planning's phases and times and the measurements among them.
        logging.basicConfig(level=logging.WARNING, format="%(message)s", stream=sys.stderr)
        logging.getLogger("offload_compiler").setLevel(logging.INFO)
        print(json.dumps(asdict(run_strategy(json.loads(argv[1])))))
        return 0
    from ..__main__ import version_text

    parser = argparse.ArgumentParser(prog="python -m offload_compiler.compare",
                                     description="Run a model under every memory strategy, side by side.")
    parser.add_argument("--version", action="version", version=version_text())
    add_arguments(parser)
    return main_compare(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
