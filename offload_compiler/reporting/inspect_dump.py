"""``python -m offload_compiler inspect DUMP_DIR``: print what a dump holds.

A dump may be partial (the run stopped, the disk filled, a file was deleted): each
folder shows what it has, a line on stderr says what it lacks, and the command exits
with 1 only when nothing at all could be shown (or the ``--timeline`` file could not be
written). ``--top N`` cuts each decision table to its N largest rows. ``--graph N`` picks the dump folder ``graph_NNN``; headings give the graph id
the plan was logged with as well (see ``reporting/dump.py`` for the two numbers).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from .._version import SCHEMA_VERSION

TEXT_FILES = ("summary.txt", "plan.txt")
CODE_KINDS = ("forward", "backward", "joint")
_FOLDER = re.compile(r"graph_(\d+)")
_STAGE = re.compile(r"(forward|backward)\.(\d+)_\w+\.py")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dump_dir", help="a folder written with dump_dir= or OFFLOAD_COMPILER_DUMP_DIR")
    parser.add_argument("--graph", type=_folder_number, default=None,
                        help="only the dump folder graph_NNN (its number, e.g. 0 for graph_000)")
    parser.add_argument("--code", choices=CODE_KINDS, default=None,
                        help="print that graph's annotated code (the last stage written)")
    parser.add_argument("--timeline", default=None, help="write one Chrome trace of every graph here")
    parser.add_argument("--top", type=_rows, default=None,
                        help="at most N rows per decision table section, largest first, with a line "
                             "saying what was left out (default: every row, as plan.txt has them)")


def _rows(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of rows; give 1 or more")
    return n


def _folder_number(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a dump folder number; give 0 for graph_000, 1 for graph_001, ...")
    return n


def main_inspect(args: argparse.Namespace) -> int:
    root = Path(args.dump_dir)
    if not root.is_dir():
        _err(f"no folder {root}")
        return 1
    folders = graph_folders(root)
    if not folders:
        _err(f"no graph folders (graph_000, graph_001, ...) in {root}")
        return 1
    if args.graph is not None:
        chosen = [(n, f) for n, f in folders if n == args.graph]
        if not chosen:
            _err(f"no dump folder graph_{args.graph:03d} in {root}; --graph takes the number of "
                 f"one that is there: {', '.join(str(n) for n, _ in folders)}")
            return 1
        folders = chosen
    top = getattr(args, "top", None)
    show = (lambda f: show_code(f, args.code)) if args.code else (lambda f: show_plan(f, top))
    shown = sum(show(folder) for _, folder in folders)
    status = 0
    if args.timeline:
        status = write_timeline(folders, Path(args.timeline))
    if not shown:
        _err(f"nothing to show in {root}" + (f" for --graph {args.graph}" if args.graph is not None else ""))
        return 1
    return status


def graph_folders(root: Path) -> list[tuple[int, Path]]:
    """``(number, folder)`` for every ``graph_NNN`` folder, by number."""
    found = []
    for p in root.iterdir():
        m = _FOLDER.fullmatch(p.name)
        if m and p.is_dir():
            found.append((int(m.group(1)), p))
    return sorted(found)


def show_plan(folder: Path, top: int | None = None) -> bool:
    """Print the folder's summary and decision table (with ``top``, the table is made
    again from ``plan.json``'s records, at most ``top`` rows per section); say what is
    missing."""
    texts, missing = {}, []
    for name in TEXT_FILES:
        text, problem = _read(folder, name)
        if text is not None:
            texts[name] = text
        elif problem == MISSING:
            missing.append(name)
        else:
            _err(f"{folder.name}: {name} {problem}")
    if missing:
        has_code = not texts and any(folder.glob("*.py"))  # the hint, where nothing else is shown
        _err(f"{folder.name}: {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} missing"
             + ("; its graph code is there (--code joint, forward or backward)" if has_code else ""))
    if not texts:
        return False
    graph_id = _graph_id(folder, texts.get("summary.txt"))
    if top is not None and "plan.txt" in texts:
        table = _top_table(folder, top)
        if table is not None:
            first = texts["plan.txt"].split("\n", 1)[0]
            texts["plan.txt"] = f"{first}\n{table}\n"
    print(f"== dump folder {folder.name}" + (f": graph {graph_id}" if graph_id is not None else "") + " ==")
    for name in TEXT_FILES:
        if name in texts:
            print(texts[name])
    return True


def _top_table(folder: Path, top: int) -> str | None:
    """The decision table of ``plan.json``'s records cut to ``top`` rows per section, or
    ``None`` (said on stderr: the full ``plan.txt`` is shown instead)."""
    from .tables import decision_table

    data = _read_json(folder, "plan.json")
    records = data.get("decisions") if isinstance(data, dict) else None
    if not isinstance(records, list) or not all(isinstance(d, dict) for d in records):
        _err(f"{folder.name}: plan.json has no decision records; --top ignored, plan.txt shown whole")
        return None
    return decision_table(records, top=top)


def show_code(folder: Path, kind: str) -> bool:
    """Print the last stage of ``kind``'s code written in the folder."""
    if kind == "joint":
        name = "joint.py"
    else:
        stages = [(int(m.group(2)), p.name) for p in folder.iterdir()
                  if (m := _STAGE.fullmatch(p.name)) and m.group(1) == kind]
        if not stages:
            _err(f"{folder.name}: no {kind} code ({kind}.*.py) is in the folder")
            return False
        name = max(stages)[1]
    text, problem = _read(folder, name)
    if text is None:
        _err(f"{folder.name}: {name} {problem}")
        return False
    print(f"# {folder / name}")
    print(text)
    return True


def write_timeline(folders: list[tuple[int, Path]], out: Path) -> int:
    """One Chrome trace of every folder's ``timeline.json``; each graph is a process
    numbered by its dump folder (graph ids of two processes' dumps may coincide)."""
    events: list[dict[str, Any]] = []
    used = 0
    for number, folder in folders:
        trace = _read_json(folder, "timeline.json")
        if trace is None:
            continue
        if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
            _err(f"{folder.name}: timeline.json has no traceEvents list")
            continue
        events += [{**e, "pid": number} for e in trace["traceEvents"] if isinstance(e, dict)]
        used += 1
    if not used:
        _err("no timeline written: no dump folder has a readable timeline.json")
        return 0
    try:
        out.write_text(json.dumps({"schema_version": SCHEMA_VERSION, "traceEvents": events,
                                   "displayTimeUnit": "ms"}), encoding="utf-8")
    except OSError as error:
        _err(f"cannot write the timeline to {out}: {error}")
        return 1
    print(f"timeline of {used} of {len(folders)} graph(s) written to {out}")
    return 0


def _graph_id(folder: Path, summary: str | None) -> int | None:
    """The plan's graph id: from ``plan.json``, else the summary's first line."""
    text, _ = _read(folder, "plan.json")
    try:
        data = json.loads(text) if text is not None else None
    except json.JSONDecodeError:
        data = None  # the heading falls back on the summary; plan.json is not shown
    if isinstance(data, dict) and isinstance(data.get("graph_id"), int):
        return data["graph_id"]
    m = re.match(r"graph (\d+)", summary or "")
    return int(m.group(1)) if m else None


MISSING = "is missing"


def _read(folder: Path, name: str) -> tuple[str | None, str | None]:
    """``(text, None)``, or ``(None, what is wrong)``: missing, unreadable or empty."""
    path = folder / name
    if not path.exists():
        return None, MISSING
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        return None, f"cannot be read ({error})"
    return (text, None) if text.strip() else (None, "is empty")


def _read_json(folder: Path, name: str) -> Any:
    """The file's JSON, or ``None`` (said on stderr) if missing, unreadable or not JSON."""
    text, problem = _read(folder, name)
    if text is None:
        _err(f"{folder.name}: {name} {problem}")
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        _err(f"{folder.name}: {name} is not valid JSON ({error})")
        return None


def _err(message: str) -> None:
    sys.stdout.flush()  # keep stdout and stderr in order on a terminal
    print(f"inspect: {message}", file=sys.stderr)
