"""The decision vocabulary: what happens to one saved activation.

One ``str`` enum from the solver to the dump: the simulator, the solver, the plan
records, reports and JSON all speak it. Members compare equal to their values
(``Decision.OFFLOAD == "offload"``) and print as them, so JSON and text need no
conversion.
"""

from __future__ import annotations

import enum


class Decision(str, enum.Enum):
    KEEP = "keep"
    """Stays in device memory from forward to backward."""
    OFFLOAD = "offload"
    """Copied to pinned host memory in forward, back to the device before backward's use."""
    RECOMPUTE = "recompute"
    """Freed after forward, computed again in backward from what is kept."""

    __str__ = str.__str__
    __format__ = str.__format__


KEEP, OFFLOAD, RECOMPUTE = Decision.KEEP, Decision.OFFLOAD, Decision.RECOMPUTE
