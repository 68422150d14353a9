"""Transfer ops for graphs run under CUDA graphs: host buffers found through a token.

With ``mode="reduce-overhead"`` Inductor records the forward and the backward as CUDA
graphs (its CUDA graph trees) and replays them; on a replay no Python runs, only the
recorded GPU work, at the addresses it was recorded with. The default transfer ops
(``ops.py``) do not fit: the forward returns each host copy as a CPU tensor for the
backward to read, and Inductor records no graph that has a CPU tensor among its inputs
or outputs ("skipping cudagraphs due to cpu device"). Here the forward returns a
*token* instead, a one-byte tensor on the activation's device, and the host buffer is
found through it::

    tok = offload.d2h.slot(x, keep_strides, slot, label)   # copy x into a host block
    offload.release.slot(x, tok, anchor)                   # compute waits for the copy
    ...
    x_dev = offload.h2d.slot(tok, anchor, device, size, stride, dtype, keep_strides, slot, label)
    offload.wait(x_dev)                                    # as in ops.py

``slot`` is the transfer's index in its graph and ``label`` the activation's module and
source line (both only for messages). Which host block a token stands for:

- Run eagerly (a warm-up run of the CUDA graph trees, a graph Inductor runs without
  CUDA graphs, the CPU loopback): a pool block checked out while the token lives
  (``HostBlock.owner``), found again by the token's storage.
- Recorded (a stream is capturing): the block *held* for the token's device address in
  the graph tree being recorded, the same block every time that address is recorded, so
  the recorded D2H and H2D copies meet at one host address on every replay. Two
  recordings whose tokens share an address never hold live values at once: the tree
  never replays a graph over memory that a live tensor of another recording uses (it
  records a new graph instead), which is the rule Inductor's own saved activations rely
  on. A held block comes from the pool's idle blocks (those the warm-up run used; pinned
  memory cannot be allocated during capture) and goes back to the system when the tree
  that recorded it is gone.

The backward declares the token written (nominally). Inductor then records the backward
only when its tokens are outputs of a recorded forward ("mutated inputs" are allowed on
those alone); after a forward that ran without CUDA graphs the backward runs without
them too, and reads the blocks the forward bound, never an address baked in elsewhere.

Ordering is as in ``ops.py``: copies on the side streams, which wait for the live
compute stream and are waited for by ``release`` and ``wait``; under capture those
event records and waits are the edges that fork the copy streams from the capturing
stream and join them back before the capture ends. Events of runs before a capture are
not waited for inside it (CUDA forbids waiting on them there); a capture begins after
a device synchronize (Inductor's trees and ``torch.cuda.graph`` both do one).
"""

from __future__ import annotations

import logging
import weakref
from typing import Any, List

import torch
from torch import Tensor
from torch.multiprocessing.reductions import StorageWeakRef

from . import ops, streams
from .pool import HostBlock, block_nbytes, host_pool, mib

log = logging.getLogger(__name__)

#: Overload name of the token ops (``torch.ops.offload.d2h.slot`` and so on).
OVERLOAD = "slot"

# Blocks bound eagerly to a live token: (device type, index, token address) ->
# (storage identity of the token, block). An entry is valid while the block's owner is
# that storage (the block goes back to the pool once the token dies).
_bound: dict[tuple[str, int, int], tuple[int, HostBlock]] = {}
_bound_sweep_at = 1024
# Blocks held for recorded graphs: (owner id, device index, token address, size class).
_held: dict[tuple[int, int, int, int], HostBlock] = {}
_owners: dict[int, Any] = {}  # owner id -> finalizer
_retired: list[HostBlock] = []  # held by a tree that is gone, not yet given back
# D2H completion events by token, popped by release.slot: (device key, token address).
_d2h_done: dict[tuple[str, int, int], torch.cuda.Event] = {}
_said: set[str] = set()


class _Process:
    """Owner of blocks held by recordings made outside Inductor's graph trees: they stay
    for the life of the process (nothing says when such a recording dies)."""


_PROCESS = _Process()


def _device_key(t: Tensor) -> tuple[str, int]:
    return t.device.type, t.device.index if t.device.index is not None else -1


def _capturing(device: torch.device) -> bool:
    """Whether the current stream of ``device`` is being captured into a CUDA graph."""
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def _recording_owner(device: torch.device) -> Any:
    """What bounds the life of the graphs being recorded on ``device``: Inductor's CUDA
    graph tree manager of the device (its recordings die with it), else the process."""
    try:
        from torch._inductor import cudagraph_trees

        manager = cudagraph_trees.get_manager(device.index, create_if_none_exists=False)
    except Exception as err:  # noqa: BLE001 - private API of Inductor; any failure: keep for good
        log.debug("offload: no CUDA graph tree manager (%s)", err)
        manager = None
    return manager if manager is not None else _PROCESS


def _say_once(key: str, level: int, msg: str, *args: Any) -> None:
    if key not in _said:
        _said.add(key)
        log.log(level, msg, *args)


def _like(size, stride, dtype) -> Tensor:
    return torch.empty_strided(size, stride, dtype=dtype, device="meta")


# -- holding blocks for recordings ------------------------------------------------
def _held_key(owner: Any, token: Tensor, like: Tensor) -> tuple[int, int, int, int]:
    index = token.device.index if token.device.index is not None else -1
    return id(owner), index, token.data_ptr(), block_nbytes(like.numel() * like.element_size())


def _hold(token: Tensor, like: Tensor, slot: int, label: str) -> tuple[Tensor, HostBlock]:
    """The host block recordings of this token's address use (taken the first time)."""
    owner = _recording_owner(token.device)
    key = _held_key(owner, token, like)
    block = _held.get(key)
    if block is None:
        got = host_pool().take_idle(like, pinned=token.device.type == "cuda")
        if got is None:
            raise RuntimeError(
                f"offload: recording a CUDA graph needs a host buffer of {mib(key[3])} for the "
                f"offloaded activation #{slot} ({label}), and the host pool has no idle one: "
                "pinned memory cannot be allocated while a stream is being captured. The "
                "warm-up run before a recording leaves its buffers idle; keep that warm-up "
                "(do not set torch._inductor.config.triton.skip_cudagraph_warmup) and let the "
                "previous step's outputs die before the step that records")
        block = got[1]
        _held[key] = block
        _watch(owner)
        log.debug("offload: CUDA graph recording holds a host block of %s for #%d (%s)",
                  mib(block.nbytes), slot, label)
    return block.view(like), block


def _watch(owner: Any) -> None:
    oid = id(owner)
    if oid in _owners or owner is _PROCESS:
        if owner is _PROCESS:
            _say_once("process", logging.INFO,
                      "offload: a CUDA graph recorded outside Inductor's graph trees holds host "
                      "buffers for the life of the process")
        return
    _owners[oid] = weakref.finalize(owner, _owner_gone, oid)
    _owners[oid].atexit = False


def _owner_gone(oid: int) -> None:
    """The graph tree is gone, and its recordings with it: release what they held."""
    _owners.pop(oid, None)
    for key in [k for k in _held if k[0] == oid]:
        _retired.append(_held.pop(key))
    _release_retired()


def _release_retired() -> None:
    """Give back the blocks of gone trees, after the GPU is done with them. Runs from
    garbage collection too: never during a capture, never waiting for the pool's lock
    (the next transfer op tries again)."""
    if not _retired or torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
        return
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()  # a replay launched before may still copy
    nbytes = host_pool().release_held(_retired, blocking=False)
    if nbytes:
        log.info("offload: released %s of host buffers held by recorded CUDA graphs (their "
                 "graph tree is gone)", mib(nbytes))


# -- eager bindings -----------------------------------------------------------------
def _bind(token: Tensor, block: HostBlock) -> None:
    global _bound_sweep_at
    key = (*_device_key(token), token.data_ptr())
    _bound[key] = (token.untyped_storage()._cdata, block)
    if len(_bound) > _bound_sweep_at:
        for k, (cdata, b) in list(_bound.items()):
            if not _valid(cdata, b):
                del _bound[k]
        _bound_sweep_at = max(1024, 2 * len(_bound))


def _valid(cdata: int, block: HostBlock) -> bool:
    return block.owner is not None and block.owner.cdata == cdata and not block.owner.expired()


def _find(token: Tensor, like: Tensor, capturing: bool, slot: int, label: str) -> tuple[Tensor, HostBlock]:
    """The block holding the value ``token`` stands for."""
    if not capturing:  # a recording never reads a block an eager run bound
        entry = _bound.get((*_device_key(token), token.data_ptr()))
        if entry is not None and entry[0] == token.untyped_storage()._cdata and _valid(*entry):
            return entry[1].view(like), entry[1]
    block = _held.get(_held_key(_recording_owner(token.device), token, like))
    if block is None:
        raise RuntimeError(
            f"offload: no host buffer for the offloaded activation #{slot} ({label}): its token "
            "was made neither by an eager forward run that is still referenced nor by a recorded "
            "forward of this CUDA graph tree (please report this)")
    return block.view(like), block


# -- op bodies ----------------------------------------------------------------------
def copy_out(src: Tensor, keep_strides: bool, slot: int, label: str) -> Tensor:
    """Body of ``offload::d2h.slot``: copy ``src`` into a host block; returns the token."""
    if keep_strides and not ops._dense(src):
        raise RuntimeError(
            f"offload.d2h: planned as dense but got shape {tuple(src.shape)} strides "
            f"{src.stride()} for #{slot} ({label}); refusing to copy (please report this)")
    like = _like(src.shape, ops._host_strides(src, keep_strides), src.dtype)
    compute = torch.cuda.current_stream(src.device) if src.device.type == "cuda" else None
    token = torch.empty(1, dtype=torch.uint8, device=src.device)
    capturing = _capturing(src.device)
    if capturing:
        host, block = _hold(token, like, slot, label)
    else:
        if _retired:
            _release_retired()
        host, block = _bind_new(token, like, src.device.type == "cuda", slot, label)
    if compute is None:  # loopback
        host.copy_(src)
        return token
    stream = streams.copy_stream(src.device, streams.D2H)
    stream.wait_stream(compute)
    if not capturing:  # earlier copies from/into this block are done
        for event in block.events:
            stream.wait_event(event)
        if block.ready_event is not None:
            stream.wait_event(block.ready_event)
    with streams.on(stream, compute):
        streams.inject_delay(streams.D2H)
        host.copy_(src, non_blocking=True)
    done = streams.mark_ready(stream)
    if not capturing:
        block.events, block.ready_event = [], done
    _d2h_done[(*_device_key(token), token.data_ptr())] = done
    return token


def _bind_new(token: Tensor, like: Tensor, cuda: bool, slot: int, label: str) -> tuple[Tensor, HostBlock]:
    owner = StorageWeakRef(token.untyped_storage())
    pool = host_pool()
    got = pool.acquire(like, pinned=cuda, owner=owner)
    if got is None and cuda:  # pinning failed: a pageable block (the copy blocks the host)
        _say_once("pageable", logging.WARNING,
                  "offload: no pinned host memory for an offloaded activation under CUDA graph "
                  "mode; copying into pageable memory, which blocks the host (said once)")
        got = pool.acquire(like, pinned=False, owner=owner)
    if got is None:
        raise RuntimeError(
            f"offload: no host memory of {mib(like.numel() * like.element_size())} for the "
            f"offloaded activation #{slot} ({label}) (host pool limit or host memory exhausted)")
    _bind(token, got[1])
    return got


def _d2h_fake(src: Tensor, keep_strides: bool, slot: int, label: str) -> Tensor:
    return torch.empty(1, dtype=torch.uint8, device=src.device)


def release_source(src: Tensor, token: Tensor, anchor: Tensor | None) -> None:
    """Body of ``offload::release.slot``: the compute stream waits for the copy of
    ``src``; after that, freeing ``src`` is safe (``anchor`` only orders the op)."""
    event = _d2h_done.pop((*_device_key(token), token.data_ptr()), None)
    if event is not None:
        torch.cuda.current_stream(src.device).wait_event(event)


def copy_in(token: Tensor, anchor: Tensor | None, device: str, size: List[int], stride: List[int],
            dtype: torch.dtype, keep_strides: bool, slot: int, label: str) -> Tensor:
    """Body of ``offload::h2d.slot``: copy the value ``token`` stands for back to
    ``device`` with ``size`` and ``stride``; pair with ``offload::wait``."""
    target = torch.device(device)
    host_stride = stride if keep_strides else list(torch._prims_common.make_contiguous_strides_for(size))
    like = _like(size, host_stride, dtype)
    capturing = _capturing(target)
    host, block = _find(token, like, capturing, slot, label)
    out = torch.empty_strided(size, stride, dtype=dtype, device=target)
    if target.type != "cuda":  # loopback
        out.copy_(host)
        return out
    compute = torch.cuda.current_stream(target)
    stream = streams.copy_stream(target, streams.H2D)
    stream.wait_stream(compute)
    if not capturing and block.ready_event is not None:
        stream.wait_event(block.ready_event)
    with streams.on(stream, compute):
        streams.inject_delay(streams.H2D)
        out.copy_(host, non_blocking=True)
    done = streams.mark_ready(stream)
    if not capturing and block.owner is not None:  # an eagerly bound block: its next D2H waits
        block.events.append(done)
    ops._pending[out.untyped_storage().data_ptr()] = done
    return out


def _h2d_fake(token: Tensor, anchor: Tensor | None, device: str, size: List[int], stride: List[int],
              dtype: torch.dtype, keep_strides: bool, slot: int, label: str) -> Tensor:
    return torch.empty_strided(size, stride, dtype=dtype, device=torch.device(device))


_lib = torch.library.Library(ops.NAMESPACE, "FRAGMENT")
_OPS = (
    # (schema, kernel, fake, tags)
    (f"d2h.{OVERLOAD}(Tensor src, bool keep_strides, int slot, str label) -> Tensor",
     copy_out, _d2h_fake, ops._TAGS),
    # ``token`` is declared written (it is not): keeps the op through dead-code
    # elimination, as ``host`` does for ``offload::release``.
    (f"release.{OVERLOAD}(Tensor src, Tensor(a!) token, Tensor? anchor) -> ()",
     release_source, ops._nothing, ()),
    # ``token`` is declared written (it is not): Inductor's trees then record the backward
    # only when the token is an output of a recorded forward (see the module docstring).
    (f"h2d.{OVERLOAD}(Tensor(a!) token, Tensor? anchor, str device, int[] size, int[] stride, "
     "ScalarType dtype, bool keep_strides, int slot, str label) -> Tensor", copy_in, _h2d_fake, ()),
)
ops.define(_lib, _OPS)

D2H = torch.ops.offload.d2h.slot
RELEASE = torch.ops.offload.release.slot
H2D = torch.ops.offload.h2d.slot
SLOT_OPS = (D2H, RELEASE, H2D)

for _op in (RELEASE, H2D):
    torch.fx.node.has_side_effect(_op)
