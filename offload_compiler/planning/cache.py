"""The plan cache: a plan made once is found again by a later compile of the same graph.

Two ways a compile can skip planning:

- Inductor's (or AOTAutograd's) own cache hits: the compiled artifact is loaded and our
  partitioner is never called. Without this cache, such a compile had no plan record, no
  log line and no dump ("offloaded 0.0 MiB in 0 graphs", or ``explain`` after training
  saying there was nothing to decide). The backend looks the plan up here instead.
- The partitioner runs (no Inductor cache, or a miss there), and the plan was made
  before: the recorded recompute tags are put back on the joint graph, min-cut runs once,
  and the recorded decisions and schedule are applied, with no search.

The key (:func:`plan_key`) covers the Dynamo graph's code, every input's shape, stride,
dtype, device and ``requires_grad``, the options that change a plan (all but
``dump_dir``), the hardware profile the plan is costed with, the torch version and this
package's source. A changed option, graph, profile or code misses. An entry records the
joint graph's hash, so a joint graph that differs under the same key (another
partitioner configuration, say) misses too and is planned afresh.

Entries are pickles under ``$OFFLOAD_COMPILER_CACHE_DIR/plans`` (default
``$XDG_CACHE_HOME/offload_compiler/plans``, else ``~/.cache/offload_compiler/plans``).
``plan_cache=False`` or ``OFFLOAD_COMPILER_PLAN_CACHE=0`` turns the cache off; a cache
folder that cannot be written is warned about once and planning goes on.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
import os
import pickle
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
import torch.fx as fx

from ..reporting.records import GraphPlan

log = logging.getLogger("offload_compiler")

ENV_DIR = "OFFLOAD_COMPILER_CACHE_DIR"
ENV_SWITCH = "OFFLOAD_COMPILER_PLAN_CACHE"
#: Bumped when an entry's layout changes, so older entries miss.
ENTRY_VERSION = 2

_warned: set[str] = set()
_lock = threading.Lock()


def cache_dir() -> Path:
    """Where the package caches what it measures and plans."""
    root = os.environ.get(ENV_DIR)
    if root:
        return Path(root)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "offload_compiler"


def enabled(config_switch: bool) -> bool:
    """The option and the environment variable both allow it."""
    return config_switch and os.environ.get(ENV_SWITCH, "1").strip().lower() not in ("0", "false", "off", "no")


@dataclass
class CachedPlan:
    """What a compile needs to reproduce a plan without planning."""

    joint_hash: str
    """Hash of the joint graph the plan was made on."""
    recompute_chains: dict[str, list[str]]
    """Each recomputed value's chain (joint node names), realised on min-cut's partition."""
    plan: GraphPlan
    """The plan record (its graphs left out)."""
    release_after: dict[str, str] | None
    """Offloaded value -> forward node its release goes after (cost model only)."""
    issue_before: dict[str, str] | None
    """Offloaded value -> backward node its reload is issued before (cost model only)."""
    graph_texts: dict[str, str] = field(default_factory=dict)
    """The rewritten forward and backward as dumped, when the compile that planned dumped."""
    version: int = ENTRY_VERSION


def _tensor_meta(x: Any) -> str:
    if isinstance(x, torch.Tensor):
        return (f"T({tuple(x.shape)},{tuple(x.stride())},{x.dtype},{x.device.type},"
                f"{x.requires_grad})")
    return f"{type(x).__name__}({x!r})"


@functools.lru_cache(maxsize=None)
def source_hash() -> str:
    """A hash of this package's and ``passes``' source: the code's version in cache keys."""
    root = Path(__file__).resolve().parents[1]
    files = sorted([*root.rglob("*.py"), *(root.parent / "passes").rglob("*.py")])
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.read_bytes())
    return digest.hexdigest()[:16]


def key_for(gm: fx.GraphModule, example_inputs: Sequence[Any], config: Any,
            planned_at: Mapping[Any, int] | None = None, corrections: Any = None,
            search: bool = True) -> str | None:
    """The plan cache's key for compiling ``gm`` with ``config`` (``None`` with the cache
    off): the graph, its inputs, the options that change a plan, grad mode, the sizes
    planned at (dynamic shapes), the hardware profile it is costed with, whether
    ``"auto"`` searches (``search``) and the code."""
    from .hardware import profile_for

    if not enabled(config.plan_cache):
        return None
    device = next((x.device for x in example_inputs if isinstance(x, torch.Tensor)
                   and x.is_floating_point() and x.device.type in config.devices), None)
    hardware = None
    if device is not None and config.policy != "none":
        hardware = dataclasses.asdict(profile_for(device, dict(config.hardware or ())))
    fingerprint = config.fingerprint(exclude=("dump_dir", "plan_cache", "replan"))
    if corrections is not None:  # measured inputs, the bytes under memory_limit
        fingerprint += corrections.key()
    if not search:
        fingerprint += "-unsearched"
    return plan_key(gm, example_inputs, fingerprint,
                    torch.is_grad_enabled(),
                    sorted((str(s), v) for s, v in (planned_at or {}).items()), hardware)


def plan_key(gm: fx.GraphModule, example_inputs: Sequence[Any], config_fingerprint: str,
             grad_enabled: bool, planned_at: list[tuple[str, int]],
             hardware: dict[str, Any] | None) -> str:
    """The key of the plans made for Dynamo graph ``gm`` with these inputs and options."""
    digest = hashlib.sha256()
    for part in (gm.code, *map(_tensor_meta, example_inputs),
                 *(f"{n}:{_tensor_meta(t)}" for n, t in gm.named_parameters()),
                 *(f"{n}:{_tensor_meta(t)}" for n, t in gm.named_buffers()),
                 config_fingerprint, str(grad_enabled), repr(planned_at),
                 repr(sorted((hardware or {}).items())), torch.__version__,
                 source_hash(), str(ENTRY_VERSION)):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:32]


def joint_hash(joint_gm: fx.GraphModule) -> str:
    """Hash of the joint graph (each node's op, name, target and arguments, what its
    code is made of) and its placeholders' values. Read off the nodes, not the module's
    ``code``: AOTAutograd's joint module has no code yet, and generating it for this
    hash alone took 0.12 s of the example GPT ``h100`` preset's cold compile on a CPU
    (``benchmarks/RESULTS.md``, session 25), against 6 ms this way."""
    digest = hashlib.sha256()
    for n in joint_gm.graph.nodes:
        args = fx.node.map_arg((n.args, n.kwargs), lambda a: a.name)
        digest.update(f"{n.op} {n.name} {n.target} {args!r}\n".encode())
        if n.op == "placeholder":
            digest.update(_tensor_meta(n.meta.get("val")).encode())
    return digest.hexdigest()[:32]


def _plans_dir() -> Path:
    return cache_dir() / "plans"


def _path(key: str) -> Path:
    return _plans_dir() / f"{key}.pkl"


def stored() -> list[Path]:
    """The entries stored in the cache folder."""
    return sorted(_plans_dir().glob("*.pkl"))


def load(key: str) -> CachedPlan | None:
    """The entry stored under ``key``, or ``None``."""
    path = _path(key)
    try:
        with open(path, "rb") as f:
            entry = pickle.load(f)
    except FileNotFoundError:
        return None
    except Exception as e:  # a torn or foreign file: plan afresh
        log.info("offload: plan cache entry %s unreadable (%s); planning afresh", path, e)
        return None
    if not isinstance(entry, CachedPlan) or entry.version != ENTRY_VERSION:
        return None
    return entry


def store(key: str, entry: CachedPlan) -> None:
    """Write the entry atomically; a folder that cannot be written is warned about once."""
    path = _path(key)
    entry = dataclasses.replace(entry, plan=dataclasses.replace(entry.plan, fw_graph=None, bw_graph=None,
                                                            resimulate=None))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        with open(tmp, "wb") as f:
            pickle.dump(entry, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except (OSError, pickle.PicklingError, TypeError, AttributeError) as e:
        with _lock:
            first = str(path.parent) not in _warned
            _warned.add(str(path.parent))
        if first:
            log.warning("offload: cannot write the plan cache in %s (%s); plans will be made "
                        "again on every compile (set %s to a writable folder, or %s=0)",
                        path.parent, e, ENV_DIR, ENV_SWITCH)
