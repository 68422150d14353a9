"""The package's version, the torch versions it is tested with, and the layout version
of the JSON it writes. ``pyproject.toml`` reads ``__version__`` from here (statically:
building the package does not import torch); its torch bound repeats ``TESTED_TORCH``,
and ``tests/test_ecosystem.py`` checks that the two agree."""

from __future__ import annotations

import re
import warnings

__version__ = "0.1.0"

#: Torch releases this version is tested with: ``>= 2.11`` and ``< 2.14`` (2.11 and 2.13
#: on GPUs, 2.13 in CI). The package uses private ``torch._inductor`` and
#: ``torch._functorch`` APIs, which change between releases.
TESTED_TORCH = ((2, 11), (2, 14))

#: ``schema_version`` of every JSON file the package writes (``plan.json``,
#: ``config.json``, ``timeline.json``, ``compare.json``, the cached hardware profile):
#: raised when a field changes meaning or goes away, not when one is added.
SCHEMA_VERSION = 1


def torch_version_warning(version: str) -> str | None:
    """What to tell a user of torch ``version`` outside ``TESTED_TORCH``, or ``None``.
    Pre-releases count as their release (``2.14.0.dev20260101`` is 2.14)."""
    match = re.match(r"(\d+)\.(\d+)", version)
    lo, hi = TESTED_TORCH
    if match is not None and lo <= (int(match.group(1)), int(match.group(2))) < hi:
        return None
    return (f"offload_compiler {__version__} is tested with torch >={lo[0]}.{lo[1]},"
            f"<{hi[0]}.{hi[1]}; torch {version} is installed. It relies on private "
            "torch._inductor and torch._functorch APIs that change between releases: expect "
            "errors at compile time, or check the gradients against eager before relying on it.")


def warn_on_untested_torch(version: str) -> None:
    """A ``UserWarning`` for a torch outside ``TESTED_TORCH`` (said at import)."""
    message = torch_version_warning(version)
    if message is not None:
        warnings.warn(message, UserWarning, stacklevel=2)
