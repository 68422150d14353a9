"""Byte counts as people write and read them: ``"64MiB"``, ``"1.5 GB"``, ``"12.5 MiB"``.

:func:`parse_nbytes` reads a size given as text (an option, an environment variable);
:class:`ByteSize` is a byte count given with a unit that keeps its text;
:func:`nbytes_text` writes bytes for people (logs, warnings)."""

from __future__ import annotations

import re

SIZE_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
              "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}
UNITS_TEXT = "B, KiB, MiB, GiB, TiB, KB, MB, GB, TB"
SIZE_RE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]i?b|b)?\s*")


def parse_nbytes(name: str, text: str, *, unit_required: bool = False) -> int | None:
    """A size given as text: ``"auto"`` as ``None``; ``"1048576"``, ``"64MiB"``, ``"1.5 GB"``
    as bytes; else a ``ValueError`` naming ``name``. With ``unit_required``, a bare number
    (``"1048576"``) and ``"auto"`` are refused too."""
    if not unit_required and text.strip().lower() == "auto":
        return None
    match = SIZE_RE.fullmatch(text.lower())
    if match is None or (unit_required and not match.group(2)):
        accepted = ("bytes with a unit" if unit_required
                    else "\"auto\" or a number of bytes, optionally with a unit")
        raise ValueError(
            f"{name}={text!r} is not valid; give {accepted} ({UNITS_TEXT}), e.g. \"256MiB\""
        )
    return int(float(match.group(1)) * SIZE_UNITS[match.group(2) or ""])


class ByteSize(int):
    """A byte count written with a unit (``ByteSize("12GiB")``): an ``int`` of bytes to
    arithmetic and to the planner, the text as written to people (``str``, ``repr``,
    ``config.json``), so a config prints as it was given and can be given again."""

    text: str

    def __new__(cls, text: str, *, name: str = "size") -> "ByteSize":
        if not isinstance(text, str):
            raise ValueError(f"{name}={text!r} is not valid; give bytes with a unit "
                             f"({UNITS_TEXT}) as a string, e.g. \"12GiB\"")
        nbytes = parse_nbytes(name, text, unit_required=True)
        self = super().__new__(cls, nbytes)
        self.text = text.strip()
        return self

    def __getnewargs__(self) -> tuple[str]:  # pickle and copy rebuild it from its text
        return (self.text,)

    def __repr__(self) -> str:
        return repr(self.text)

    def __str__(self) -> str:
        return self.text


def with_unit(nbytes: int) -> str:
    """``nbytes`` in the largest binary unit that divides it: ``"2GiB"``, ``"3B"``."""
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        size = SIZE_UNITS[unit.lower()]
        if nbytes and nbytes % size == 0:
            return f"{nbytes // size}{unit}"
    return f"{nbytes}B"


def nbytes_text(nbytes: float) -> str:
    """Bytes for people: ``512 B``, ``3.0 KiB``, ``12.5 MiB``, ``1.25 GiB`` (a negative
    count keeps its sign)."""
    size = abs(nbytes)
    if size < 2**10:
        return f"{int(nbytes)} B"
    for unit, scale, digits in (("KiB", 2**10, 1), ("MiB", 2**20, 1), ("GiB", 2**30, 2)):
        if size < 2**10 * scale or unit == "GiB":
            return f"{nbytes / scale:.{digits}f} {unit}"
    raise AssertionError("unreachable")
