"""Data parallelism for the comparison: one strategy run on ``nproc`` processes.

``run_distributed(spec)`` starts ``spec["nproc"]`` processes with
``torch.multiprocessing`` (NCCL on CUDA, one GPU per rank; gloo on CPU), each running
the strategy on its own batch with the model wrapped in DDP or sharded with FSDP2, and
returns rank 0's row: its step time, its memory (each rank's memory is its own), the
first step's loss on its batch and the gradient norm of the whole model.

The wrapping follows torchtitan: with whole-model compile the model is wrapped first and
the wrapper compiled (DDP's optimizer then splits the graph at its bucket boundaries);
with ``per-block`` compile each block is compiled first, then DDP wraps the model, or
FSDP2 shards each block and then the root (``fully_shard``).

The pieces (:func:`init`, :func:`wrap`, :func:`grad_norm`, :func:`spawn`) are shared
with the two-GPU tests.
"""

from __future__ import annotations

import json
import logging
import socket
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

log = logging.getLogger(__name__)

KINDS = ("ddp", "fsdp2")


def free_port() -> int:
    """A TCP port free on this host now, for the process group's rendezvous."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init(rank: int, world: int, port: int, device_type: str):
    """Join the process group (NCCL on CUDA, gloo on CPU); returns this rank's device."""
    import torch
    import torch.distributed as dist

    if device_type == "cuda":
        device = torch.device("cuda", rank)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world, device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world)
    return device


def wrap(model, kind: str, device, *, blocks: Sequence[Any] = (), bucket_cap_mb: float = 25.0):
    """``model`` in DDP, or sharded with FSDP2 (each of ``blocks``, then the root)."""
    import torch.distributed as dist

    if kind == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        ids = [device.index] if device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=ids, bucket_cap_mb=bucket_cap_mb)
    if kind == "fsdp2":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh(device.type, (dist.get_world_size(),))
        for block in blocks:
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        return model
    raise ValueError(f"distributed={kind!r} is not valid; choose one of {KINDS}")


def grad_norm(parameters) -> float:
    """The gradient norm of the whole model: sharded gradients (FSDP2's ``DTensor``) are
    summed over the ranks, replicated ones (DDP's) are not."""
    import torch
    import torch.distributed as dist

    local, sharded = None, False
    for p in parameters:
        g = p.grad
        if g is None:
            continue
        if hasattr(g, "to_local"):
            g, sharded = g.to_local(), True
        sq = g.float().pow(2).sum()
        local = sq if local is None else local + sq
    if local is None:
        return 0.0
    if sharded:
        dist.all_reduce(local)
    return float(torch.sqrt(local))


def spawn(fn: Callable[..., None], nproc: int, args: tuple, timeout_s: float) -> None:
    """Run ``fn(rank, *args)`` on ``nproc`` spawned processes; raise if one fails or they
    have not all finished within ``timeout_s`` (then every one is ended: nothing hangs)."""
    import torch.multiprocessing as mp

    ctx = mp.start_processes(fn, args=args, nprocs=nproc, join=False, start_method="spawn")
    deadline = time.monotonic() + timeout_s
    while not ctx.join(timeout=max(1.0, min(10.0, deadline - time.monotonic()))):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                if p.is_alive():
                    p.kill()
            raise TimeoutError(f"{nproc} processes not finished after {timeout_s:.0f} s; ended")


def run_distributed(spec: dict[str, Any]):
    """Run ``spec``'s strategy on ``spec["nproc"]`` processes; rank 0's :class:`Row`."""
    from .run import Row

    nproc = int(spec["nproc"])
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "row.json"
        spawn(_rank_main, nproc, (nproc, free_port(), spec, str(out)),
              max(10.0, float(spec.get("timeout_s", 1800)) - 30))  # before the harness's own limit
        return Row(**json.loads(out.read_text()))


def _rank_main(rank: int, world: int, port: int, spec: dict[str, Any], out: str) -> None:
    from dataclasses import asdict

    import torch.distributed as dist

    from .run import run_strategy

    device = init(rank, world, port, spec["device"].split(":")[0])
    try:
        row = run_strategy({**spec, "device": str(device), "rank": rank})
        row.extra["ranks"] = world
        if rank == 0:
            Path(out).write_text(json.dumps(asdict(row)))
    finally:
        dist.destroy_process_group()
