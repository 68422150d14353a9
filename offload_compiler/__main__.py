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
    q = sub.add_parser("inspect", help="print the summary and decisions of every graph in a dump")
    q.add_argument("dump_dir", help="a folder written with dump_dir= or OFFLOAD_COMPILER_DUMP_DIR")
    q.add_argument("--graph", type=int, default=None, help="only this graph (its number)")
    q.add_argument("--code", choices=["forward", "backward", "joint"], default=None,
                   help="print that graph's annotated code (the last stage written)")
    q.add_argument("--timeline", default=None, help="write one Chrome trace of every graph here")
    args = parser.parse_args(argv)
    if args.command == "compare":
        return compare.main_compare(args)
    return inspect_dump(args)


def inspect_dump(args) -> int:
    import json
    from pathlib import Path

    root = Path(args.dump_dir)
    folders = sorted(p for p in root.glob("graph_*") if p.is_dir())
    if args.graph is not None:
        folders = [p for p in folders if p.name == f"graph_{args.graph:03d}"]
    if not folders:
        print(f"no graph folders in {root}" + (f" for --graph {args.graph}" if args.graph is not None else ""),
              file=sys.stderr)
        return 1
    events = []
    for folder in folders:
        if args.code:
            name = "joint.py" if args.code == "joint" else sorted(folder.glob(f"{args.code}.*.py"))[-1].name
            print(f"# {folder / name}")
            print((folder / name).read_text())
            continue
        print(f"== {folder.name} ==")
        print((folder / "summary.txt").read_text())
        print((folder / "plan.txt").read_text())
        if args.timeline:
            events += json.loads((folder / "timeline.json").read_text())["traceEvents"]
    if args.timeline:
        Path(args.timeline).write_text(json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}))
        print(f"timeline of {len(folders)} graph(s) written to {args.timeline}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
