"""The bytes the CUDA caching allocator counts for each recorded allocation.

The allocator's history (``torch.cuda.memory._record_memory_history``) records the bytes
each allocation *requested*. Its statistics, which ``torch.cuda.memory_allocated`` and
``max_memory_allocated`` read and which a user's memory limit is checked against, count
the *block* it handed out: the request rounded up to 512 bytes, or, where the free block
it was cut from would have left a remainder too small to keep apart (under 512 bytes in
the small pool, up to 1 MiB in the large one), the whole free block. A step peak replayed
from requests alone reads low by up to 1 MiB per large tensor live at the peak (ViT-B/16
at a memory limit, session 17: 8.5 to 11 MiB over the limit that the measurement did not
see).

:func:`block_bytes` rebuilds each record's block from the allocator's layout at the
measured call's start (its segments and the blocks held in them, from
``torch.cuda.memory._snapshot``) and the records that follow: an allocation takes the
free space from its address to the next held block or the segment's end, split as the
allocator splits. Where the records do not fit the layout (a segment that grows in place
under ``expandable_segments``, an allocator configured to round otherwise), it raises
:class:`Unfit`, saying where; ``history.replay`` then estimates from the allocator's own
counts at the call's phases instead, as it does where the rebuilt blocks do not sum to
those counts.
"""

from __future__ import annotations

import bisect
from typing import Any, Iterable

#: The allocator's rounding unit and smallest block (``kMinBlockSize``).
MIN_BLOCK = 512
#: Requests up to this size come from the small pool (``kSmallSize``); a large block is
#: split only when more than this would remain.
SMALL_SIZE = 1 << 20


class Unfit(ValueError):
    """The allocator's records do not fit the layout they were replayed on."""


def rounded(requested: int) -> int:
    """The allocator's ``round_size`` without ``roundup_power2_divisions``."""
    return max(MIN_BLOCK, -(-requested // MIN_BLOCK) * MIN_BLOCK)


class Layout:
    """The device memory the allocator's segments span, and the blocks held in it
    (allocated, or freed while a stream still uses them)."""

    def __init__(self, segments: Iterable[dict[str, Any]]) -> None:
        self.segments: dict[int, int] = {}  # start -> end
        self.held: dict[int, int] = {}  # block address -> block bytes
        for segment in segments:
            start = segment["address"]
            self.segments[start] = start + segment["total_size"]
            address = start  # torch without blocks' addresses: they follow one another
            for block in segment["blocks"]:
                address = block.get("address", address)
                if block["state"] != "inactive":
                    self.held[address] = block["size"]
                address += block["size"]
        self.starts = sorted(self.segments)
        self.addresses = sorted(self.held)

    def _segment_end(self, address: int) -> int | None:
        i = bisect.bisect_right(self.starts, address) - 1
        if i < 0 or address >= self.segments[self.starts[i]]:
            return None
        return self.segments[self.starts[i]]

    def allocate(self, address: int, requested: int) -> int:
        """The block an allocation at ``address`` took."""
        end = self._segment_end(address)
        if end is None:
            raise Unfit(f"an allocation at {address:#x} outside every segment")
        i = bisect.bisect_right(self.addresses, address)
        if i and self.addresses[i - 1] + self.held[self.addresses[i - 1]] > address:
            raise Unfit(f"an allocation at {address:#x} inside a held block")
        if i < len(self.addresses) and self.addresses[i] < end:
            end = self.addresses[i]
        free, size = end - address, rounded(requested)
        if free < size:
            raise Unfit(f"an allocation of {size} bytes at {address:#x} where {free} are free")
        keep_apart = MIN_BLOCK if size <= SMALL_SIZE else SMALL_SIZE + 1
        block = size if free - size >= keep_apart else free
        self.held[address] = block
        self.addresses.insert(i, address)
        return block

    def release(self, address: int) -> None:
        """The block's free completed: its space can be handed out again."""
        if self.held.pop(address, None) is not None:
            self.addresses.remove(address)

    def add_segment(self, address: int, size: int) -> None:
        if address not in self.segments:
            self.segments[address] = address + size
            bisect.insort(self.starts, address)

    def remove_segment(self, address: int) -> None:
        if self.segments.pop(address, None) is not None:
            self.starts.remove(address)


def block_bytes(segments: list[dict[str, Any]] | None, records: list[dict[str, Any]]) -> list[int]:
    """For each ``alloc`` and ``free_requested`` record in ``records`` (the allocator's
    records from the moment ``segments`` were read, every action, oldest first), the
    bytes the allocator's statistics counted for it. Raises :class:`Unfit` where the
    records do not fit the layout."""
    if not segments:
        raise Unfit("no segments were read")
    if any(s.get("is_expandable") for s in segments):
        raise Unfit("expandable segments")
    layout, out = Layout(segments), []
    for e in records:
        action = e["action"]
        if action == "alloc":
            out.append(layout.allocate(e["addr"], e["size"]))
        elif action == "free_requested":
            if e["addr"] not in layout.held:
                raise Unfit(f"a free at {e['addr']:#x} of no held block")
            out.append(layout.held[e["addr"]])
        elif action == "free_completed":
            layout.release(e["addr"])
        elif action == "segment_alloc":
            layout.add_segment(e["addr"], e["size"])
        elif action == "segment_free":
            layout.remove_segment(e["addr"])
        elif action in ("segment_map", "segment_unmap"):  # expandable segments only
            raise Unfit("a segment growing in place" if action == "segment_map"
                        else "a segment shrinking in place")
    return out
