"""``memory_limit`` in bytes, and what the device already holds, when a graph is compiled.

The limit bounds ``held before the forward + step peak``. At compile time the planner
counts what the allocator holds then (parameters, and whatever else is alive), and holds
back ``FIRST_STEPS_FACTOR`` times that for what the first steps add before a forward
(optimizer state, gradients kept between steps), where a plan fits with it held back;
from the first measurement on it counts what was measured (``replanning.py`` plans again
if the measured peak goes over, or if the measured step left the limit's room unused:
``replan.unreserved``).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable

import torch

from ..config import OffloadConfig
from ..nbytes import nbytes_text
from ..reporting.records import peak_holders
from .replan import TOLERANCE, Corrections, MemoryLimitError

progress = logging.getLogger("offload_compiler.progress")

#: ``memory_limit="device"``: the fraction of what the GPU can give that is held back for
#: the caching allocator's fragmentation (blocks split and cached, not reusable at once).
DEVICE_MARGIN = 0.05


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
    return Corrections(limit_bytes=limit, held_before_bytes=held, first_steps_bytes=FIRST_STEPS_FACTOR * held)


#: What the first steps may leave held before a forward, in times what is held when a graph
#: compiles, held back under ``memory_limit`` until measured: an Adam step's two moments are
#: twice the parameters, most of what is held then. On an H200, ResNet-50's first plan under
#: a limit (nothing held back) measured 236.8 MiB held before the forward, about 65 MiB more
#: than at compile time with no optimizer at all, and went 30 MiB over (session 42).
FIRST_STEPS_FACTOR = 2


def device_limit(device: torch.device) -> int:
    """What the GPU can give this process: free memory plus what PyTorch's allocator
    already reserves, less ``DEVICE_MARGIN`` of it for fragmentation."""
    free, _total = torch.cuda.mem_get_info(device)
    return int((free + torch.cuda.memory_reserved(device)) * (1 - DEVICE_MARGIN))


#: ``"auto"``'s first plan moves nothing where the step peak predicted for that, this many
#: times over, fits in what the device can give (:func:`unmoved_fits`): unmeasured, HF
#: Llama's step peak with nothing moved was predicted at 9.4 GiB and measured 12.4 (1.32x;
#: issue 18).
UNMOVED_MARGIN = 1.5


def room(device: torch.device | str) -> tuple[int, int] | None:
    """What the device can give this process (:func:`device_limit`) and what the
    allocator holds now, in bytes; ``None`` off a CUDA device."""
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    return device_limit(device), torch.cuda.memory_allocated(device)


def unmoved_fits(step_peak_bytes: int, device: torch.device | str) -> bool:
    """Whether a step that moves nothing, predicted to peak ``step_peak_bytes`` above what
    is held before it, can run on ``device``: ``UNMOVED_MARGIN`` times that, what the
    allocator holds now and twice that again (what the first optimizer step adds: Adam's
    two moments are twice the parameters, most of what is held when a graph compiles)
    fit in what the device can give. ``False`` off a CUDA device."""
    got = room(device)
    if got is None:
        return False
    limit, held = got
    return step_peak_bytes * UNMOVED_MARGIN + 3 * held <= limit


#: Activation budgets tried between a plan that fits and one that does not (``fit_limit``).
LIMIT_STEPS = 5
#: At most this many halvings of the activation budget while looking for a plan that fits.
MAX_HALVINGS = 12


def fit_limit(first: Any, attempt: Callable[[int], Any], baseline_peak: int, available: int,
              corrections: Corrections, graph_id: int, reserving: bool = False) -> Any:
    """The fastest realised plan whose predicted step peak (with the bytes a measurement
    found the model misses) fits in ``available`` bytes above what is held before the
    forward. ``attempt(budget)`` realises a plan for an activation budget. The search
    starts from ``first`` (a fixed ``memory_budget``'s plan) or, with ``"auto"``
    (``first`` is ``None``), from nothing moved.

    The step peak is not monotone in the activation budget: below some budget the
    backward recomputes so much that the values it regenerates, alive together, raise
    its own peak, and the plan with the least activation peak is not the one with the
    least step peak. So the search halves the activation budget from the start's peak
    until a plan fits (or the realised activation peak stops falling: the least any plan
    reaches), then bisects between that budget and the one above it that did not fit
    (``LIMIT_STEPS`` probes; larger budgets are faster). When no plan tried fits it
    raises :class:`MemoryLimitError` with the shortfall of the least step peak among
    them. Before any measurement, a least peak predicted over by no more than the
    prediction's tolerance (``replan.TOLERANCE``) is run, with a warning: the
    measurement decides. Where ``corrections`` hold bytes back for the first steps
    (``first_steps_bytes``) and no plan fits with them held back, the search runs again
    without, with a warning."""
    def peak(r: Any) -> int:
        return r.final.step_peak_bytes + corrections.unmodelled_bytes

    if corrections.first_steps_bytes and not reserving:  # held back where a plan fits with it, else not
        try:
            return fit_limit(first, attempt, baseline_peak, available, corrections, graph_id, reserving=True)
        except MemoryLimitError:
            bare = dataclasses.replace(corrections, first_steps_bytes=0)
            progress.warning("offload: graph %d: memory_limit: no plan leaves %s for what the first steps add before "
                             "the forward (optimizer state); planning for the %s held now, and planning again once "
                             "measured", graph_id, nbytes_text(corrections.first_steps_bytes),
                             nbytes_text(corrections.held_before_bytes))
            return fit_limit(first, attempt, baseline_peak, bare.available_bytes, bare, graph_id)
    probes = 0

    def probe(kind: str, budget: int) -> tuple[Any, bool]:
        nonlocal probes
        probes += 1
        trial = attempt(budget)
        fits = peak(trial) <= available
        progress.info("offload: graph %d: memory_limit %s %d: budget %s -> step peak %s (%s %s "
                      "available), step %.2f ms", graph_id, kind, probes, nbytes_text(budget),
                      nbytes_text(peak(trial)), "within" if fits else "over", nbytes_text(available),
                      trial.final.step_ms)
        return trial, fits

    start = attempt(baseline_peak) if first is None else first
    if peak(start) <= available:
        progress.info("offload: graph %d: memory_limit: the plan fits (step peak %s of %s available)",
                      graph_id, nbytes_text(peak(start)), nbytes_text(available))
        return start
    tried = [start]
    over = budget = start.final.peak_bytes  # the least budget known not to fit
    fitting = None
    for _ in range(MAX_HALVINGS):
        budget //= 2
        trial, fits = probe("halving", budget)
        if fits:
            fitting = trial
            break
        floor = trial.final.peak_bytes >= tried[-1].final.peak_bytes  # no plan goes lower
        tried.append(trial)
        if floor:
            break
        over = budget
    if fitting is None:
        return _least(tried, peak, available, corrections, graph_id)
    best, lo, hi = fitting, budget, over
    for _ in range(LIMIT_STEPS):
        mid = (lo + hi) // 2
        if mid in (lo, hi):
            break
        trial, fits = probe("probe", mid)
        if fits:
            lo = mid
            if trial.final.step_ms < best.final.step_ms:
                best = trial
        else:
            hi = mid
    return best


def _least(tried: list[Any], peak: Callable[[Any], int], available: int, corrections: Corrections,
           graph_id: int) -> Any:
    """No plan tried fits: the least-peak one, run if it is over by no more than the
    prediction's error and nothing was measured yet; else :class:`MemoryLimitError`."""
    least = min(tried, key=peak)
    short = peak(least) - available
    if corrections.measured_call is None and short <= TOLERANCE * available:
        # Unmeasured, the prediction is an estimate of about this accuracy: the least
        # peak may fit. Measuring it tells (and plans again, or raises, from the measurement).
        progress.warning(
            "offload: graph %d: memory_limit: the least step peak of the plans tried is predicted "
            "%s over the %s available under the limit of %s, within the prediction's own error "
            "(%g%%); running the least-memory plan (with replan=True, the default, on a GPU its "
            "measurement decides: planned again, or an error with the measured shortfall)",
            graph_id, nbytes_text(short), nbytes_text(available),
            nbytes_text(corrections.limit_bytes or 0), TOLERANCE * 100)
        return least
    raise MemoryLimitError(
        f"graph {graph_id}: memory_limit cannot be met: the least step peak of the {len(tried)} "
        f"plans tried is {nbytes_text(peak(least))} above the {nbytes_text(corrections.held_before_bytes)} "
        f"held before the forward, and {nbytes_text(available)} is available under the limit "
        f"of {nbytes_text(corrections.limit_bytes or 0)}: {nbytes_text(short)} short"
        f"{' (as measured)' if corrections.measured_call is not None else ''}. Raise "
        "memory_limit, use a smaller batch, or shard the model."
        + "".join(f"\n  {line}" for line in _holding(least)))


def _holding(plan: Any) -> list[str]:
    """What the least step peak is made of, as predicted (a heading, then the holders)."""
    lines = peak_holders(plan.final, most=5)
    return ["at that plan's predicted step peak:"] + [f"  {line}" for line in lines] if lines else []
