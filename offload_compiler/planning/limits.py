"""``memory_limit`` in bytes, and what the device already holds, when a graph is compiled.

The limit bounds ``held before the forward + step peak``. At compile time the planner
counts what the allocator holds then (parameters, and whatever else is alive); what the
first steps add before a forward (gradients kept between steps, optimizer state) is
counted from the first measurement on (``replanning.py`` plans again if the measured
peak goes over).
"""

from __future__ import annotations

import torch

from ..config import DEVICE_MARGIN, OffloadConfig
from .replan import Corrections


def initial(config: OffloadConfig, device: torch.device | None) -> Corrections:
    """The corrections a first plan starts from: none, or the limit and what is held."""
    if config.memory_limit is None or device is None:
        return Corrections()
    cuda = device.type == "cuda" and torch.cuda.is_available()
    if config.memory_limit == "device":
        if not cuda:
            raise ValueError(
                f"memory_limit=\"device\" needs a CUDA device, and this graph's tensors are on "
                f"{device}; give bytes with a unit (e.g. \"8GiB\") or leave memory_limit unset")
        limit = device_limit(device)
    else:
        limit = int(config.memory_limit)
    held = torch.cuda.memory_allocated(device) if cuda else 0
    return Corrections(limit_bytes=limit, held_before_bytes=held)


def device_limit(device: torch.device) -> int:
    """What the GPU can give this process: free memory plus what PyTorch's allocator
    already reserves, less ``DEVICE_MARGIN`` of it for fragmentation."""
    free, _total = torch.cuda.mem_get_info(device)
    return int((free + torch.cuda.memory_reserved(device)) * (1 - DEVICE_MARGIN))
