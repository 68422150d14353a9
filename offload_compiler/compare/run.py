"""One strategy of the comparison, run and measured in the process it is called in.

``run_strategy(spec)`` builds the model of ``spec`` (a preset of the example GPT or a
user's factory), applies one strategy (eager, Inductor, full or selective
checkpointing, ``activation_memory_budget``, PyTorch's own offloading, or this
backend), and measures the median step, memory and the first step's loss and gradient
norm. ``harness`` calls it once per strategy, each in a process of its own.

``spec["compile"]``: ``"whole"`` (the model in one ``torch.compile``) or ``"per-block"``
(each block compiled on its own, as torchtitan does; the rest runs eagerly).
``spec["distributed"]``: ``"ddp"`` or ``"fsdp2"`` over ``spec["nproc"]`` processes
(``distributed.py``).
"""

from __future__ import annotations

import functools
import importlib
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from ..config import budget_from_text, check_budget
from ..gc_scope import collections_timed
from ..reporting.records import Predictions

STRATEGY_HELP = ("eager, inductor, inductor-cudagraphs, full_ac, sac, budget:B, torch_offload, "
                 "offload:auto, offload:B, offload-cudagraphs:auto, offload-cudagraphs:B, "
                 "offload-limit:L (B: a fraction in (0, 1] or bytes with a unit; L: bytes with a "
                 "unit, e.g. 20GiB, or device)")
#: Strategies run under CUDA graphs (``mode="reduce-overhead"``).
CUDAGRAPH_STRATEGIES = ("inductor-cudagraphs", "offload-cudagraphs")
DTYPES = ("float32", "bfloat16", "float16")
COMPILE_MODES = ("whole", "per-block")


def compile_phases(least_s: float = 0.05) -> dict[str, float]:
    """Seconds of the compile so far by phase, as torch's ``dynamo_timed`` records them
    (``torch._dynamo.utils.compile_times``: Dynamo's trace, AOTAutograd, the partitioner,
    Inductor's lowering, code generation and waits for kernels), summed over the graphs;
    phases nest, so they do not add up. Phases under ``least_s`` are left out."""
    from torch._dynamo.utils import compilation_time_metrics

    summed = {name: sum(times) for name, times in compilation_time_metrics.items()}
    return {name: round(t, 2) for name, t in sorted(summed.items(), key=lambda kv: -kv[1])
            if t >= least_s}


def fraction(text: str | float) -> float:
    """A budget that must be a fraction (``--budgets``, ``budget:B``): a float in (0, 1],
    under ``memory_budget``'s rules (``"1"`` or ``1`` refused: write ``1.0``)."""
    try:
        value = budget_from_text(text) if isinstance(text, str) else check_budget(text)
    except ValueError:
        value = None
    if not isinstance(value, float):
        raise ValueError(f"{text!r} is not a fraction: give a float in (0, 1] such as 0.5 or 1.0 "
                         "(a whole number such as 1 is refused, as memory_budget refuses an int; "
                         "bytes such as 12GiB go in an offload strategy: offload:12GiB)")
    return value


@dataclass
class Row:
    strategy: str
    status: str = "ok"
    step_ms: float | None = None
    peak_gib: float | None = None
    activation_gib: float | None = None
    tokens_per_s: float | None = None
    compile_s: float | None = None
    loss: float | None = None
    grad_norm: float | None = None
    agrees: str = ""
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def load_model(spec: dict[str, Any]):
    """(model, batch, tokens_per_batch) from a preset of the example GPT or a factory."""
    import torch

    if spec.get("model"):
        module_name, _, attr = spec["model"].partition(":")
        if not attr:
            raise ValueError(f"--model {spec['model']!r}: give module:factory")
        factory = getattr(importlib.import_module(module_name), attr)
        model, batch = factory()
        batch = tuple(batch) if isinstance(batch, (tuple, list)) else (batch,)
        first = next((b for b in batch if isinstance(b, torch.Tensor)), None)
        tokens = first.numel() if first is not None and not first.is_floating_point() else (
            first.shape[0] if first is not None else 1)
        return model, batch, tokens
    from ..models.gpt import GPT, make_batch, preset

    cfg = preset(spec["preset"])
    torch.manual_seed(0)
    model = GPT(cfg)
    idx, tgt = make_batch(cfg, seed=spec.get("rank", 0))  # data parallel: a batch per rank
    return model, (idx, tgt), idx.numel()


def find_blocks(model, path: str | None):
    """The repeated blocks: ``path`` (dotted attribute of a ModuleList), or the largest
    ModuleList in the model."""
    import torch.nn as nn

    if path:
        obj = model
        for part in path.split("."):
            obj = getattr(obj, part)
        return obj
    lists = [m for m in model.modules() if isinstance(m, nn.ModuleList) and len(m) > 0]
    if not lists:
        raise ValueError("no nn.ModuleList of blocks found; name the repeated blocks with --blocks, a "
                         "dotted path to a ModuleList or Sequential of them (timm's ViT: model.blocks)")
    return max(lists, key=len)


def _sac_policy(tag_saved=None):
    import torch
    from torch.utils.checkpoint import CheckpointPolicy

    tag_saved = tag_saved or CheckpointPolicy.MUST_SAVE

    aten = torch.ops.aten
    save = {aten.mm.default, aten.addmm.default, aten.bmm.default}
    for name in ("_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
                 "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu"):
        if hasattr(aten, name):
            save.add(getattr(aten, name).default)

    def policy(ctx, op, *args, **kwargs):
        return tag_saved if op in save else CheckpointPolicy.PREFER_RECOMPUTE

    return policy


def wrap_blocks(blocks, mode: str) -> None:
    """Put every block's forward under checkpointing: ``full``, ``sac``, or ``offload``
    (SAC whose saved matmul and attention outputs are tagged ``MUST_CPU_OFFLOAD``, which
    PyTorch's own activation offloading acts on)."""
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    for block in blocks:
        inner = block.forward
        if mode == "full":
            block.forward = functools.partial(_ckpt, inner, None)
        else:
            tag = CheckpointPolicy.MUST_CPU_OFFLOAD if mode == "offload" else CheckpointPolicy.MUST_SAVE
            ctx = functools.partial(create_selective_checkpoint_contexts, _sac_policy(tag))
            block.forward = functools.partial(_ckpt, inner, ctx)


def _ckpt(fn, context_fn, *args, **kwargs):
    from torch.utils.checkpoint import checkpoint

    if context_fn is None:
        return checkpoint(fn, *args, use_reentrant=False, **kwargs)
    return checkpoint(fn, *args, use_reentrant=False, context_fn=context_fn, **kwargs)


def setup_strategy(spec: dict[str, Any], row: Row):
    """The model of ``spec`` on its device and dtype, compiled with ``spec``'s strategy
    (whole or per block; wrapped for data parallelism in a process group):
    ``(model, compiled, batch, tokens, patches)``; ``compiled`` is ``None`` when the
    strategy is unsupported (``row`` says why). Run it under ``patched(patches)``."""
    import torch

    device = torch.device(spec["device"])
    model, batch, tokens = load_model(spec)
    model = model.to(device=device, dtype=getattr(torch, spec["dtype"]))
    batch = tuple(b.to(device) if isinstance(b, torch.Tensor) else b for b in batch)
    compiled, patches = _prepare(spec["strategy"], model, spec, row, _wrapper(model, spec, device))
    return model, compiled, batch, tokens, patches


def _wrapper(model, spec: dict[str, Any], device):
    """Wraps the model for ``spec["distributed"]`` (identity without); called after the
    blocks are compiled (per-block) or before the whole model is (torchtitan's order)."""
    kind = spec.get("distributed")
    if not kind:
        return lambda m: m
    from . import distributed

    def wrap(m):
        blocks = find_blocks(model, spec.get("blocks")).children() if kind == "fsdp2" else ()
        return distributed.wrap(m, kind, device, blocks=list(blocks))

    return wrap


def _compile(model, spec: dict[str, Any], wrap, **kwargs):
    """``model`` compiled as ``spec["compile"]`` says: whole (wrapped first), or each block
    on its own (then wrapped); the result is what a step calls."""
    import torch

    if spec.get("compile", "whole") == "per-block":
        blocks = find_blocks(model, spec.get("blocks"))
        for name, block in list(blocks.named_children()):
            blocks.register_module(name, torch.compile(block, **kwargs))
        return wrap(model)
    return torch.compile(wrap(model), **kwargs)


def run_strategy(spec: dict[str, Any]) -> Row:
    import torch

    if spec.get("distributed") and "rank" not in spec:
        from .distributed import run_distributed

        return run_distributed(spec)  # runs this on every rank; rank 0's row
    row = Row(strategy=spec["strategy"])
    device = torch.device(spec["device"])
    model, compiled, batch, tokens, patches = setup_strategy(spec, row)
    if compiled is None:
        return row

    after_forward: list[int] = []

    def step(record: bool = False):
        out = compiled(*batch)
        if record and device.type == "cuda":
            after_forward.append(torch.cuda.memory_allocated(device))
        loss = out if out.dim() == 0 else out.float().mean()
        loss.backward()
        return loss

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    # Replays of CUDA graphs allocate nothing: their memory shows on the steps that
    # warm up and record (Inductor's trees record on the second call), so under CUDA
    # graphs every step after the first is measured.
    cudagraphs = spec["strategy"].partition(":")[0] in CUDAGRAPH_STRATEGIES
    times, issued, act, peaks, held = [], [], [], [], []

    def measured(timed: bool) -> None:
        sync()
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
            before = torch.cuda.memory_allocated(device)
        t0 = time.perf_counter()
        step(record=True)
        host = time.perf_counter()  # the host has issued the step (the device may still run it)
        sync()
        if timed:
            times.append((time.perf_counter() - t0) * 1e3)
            issued.append((host - t0) * 1e3)
        if device.type == "cuda":
            peaks.append(torch.cuda.max_memory_allocated(device))
            act.append(peaks[-1] - before)
            held.append(after_forward[-1] - before)
        model.zero_grad(set_to_none=True)

    with patched(patches):
        t0 = time.perf_counter()
        loss = step()
        sync()
        row.compile_s = time.perf_counter() - t0
        row.extra["first_step_s_by_phase"] = compile_phases()
        row.loss = float(loss.detach())
        del loss  # under CUDA graphs, an output kept would pin the first step's memory
        if spec.get("distributed"):
            from .distributed import grad_norm

            row.grad_norm = grad_norm(model.parameters())  # FSDP2's gradients are shards
        else:
            grads = [p.grad.float().norm() for p in model.parameters() if p.grad is not None]
            row.grad_norm = float(torch.stack(grads).norm()) if grads else 0.0
        model.zero_grad(set_to_none=True)
        backend = getattr(compiled, "_offload_backend", None)
        t0 = time.perf_counter()
        for _ in range(spec["warmup"]):
            if cudagraphs:
                measured(timed=False)
            else:
                step()
                model.zero_grad(set_to_none=True)
        # Steps until the backend's measurements (and any re-plan) are over.
        settling = 0 if backend is None else backend.settle(
            lambda: (step(), model.zero_grad(set_to_none=True)))
        sync()
        row.extra["warmup_s"] = time.perf_counter() - t0
        row.extra["settle_steps"] = settling
        with collections_timed() as collected:
            for _ in range(spec["steps"]):
                measured(timed=True)
            row.step_ms = back_to_back(step, lambda: model.zero_grad(set_to_none=True), sync, spec["steps"])
    if cudagraphs:
        row.note = "memory measured on the steps that warm up and record the CUDA graphs"
    # Each synchronised step: its host time before the first kernel and any phase the host
    # paced show in full there, where a training loop issues the next step while the GPU
    # still runs this one.
    row.extra["synced_step_ms"] = statistics.median(times)
    row.extra["step_times_ms"] = [round(t, 3) for t in times]  # each synchronised step: the spread
    # The host's time to issue a synchronised step: near the back-to-back step, the host
    # sets the pace. Collections over the measured steps, synchronised and back to back.
    row.extra["host_step_ms"] = statistics.median(issued)
    row.extra["gc"] = {"collections": collected.count, "ms": round(collected.ms, 3)}
    row.tokens_per_s = tokens / (row.step_ms / 1e3)
    if peaks:
        row.peak_gib = max(peaks) / 2**30
        row.activation_gib = max(act) / 2**30
        row.extra["held_after_forward_gib"] = max(held) / 2**30
    if backend is not None and backend.plans:
        plans = backend.current_plans
        predicted = [b.predicted for b in plans if b.predicted]
        unrun = [b for b in backend.plans if b.reverted and b.measured is None]  # under a limit, no faster
        row.extra["replanned"] = len(backend.plans) - len(plans) - len(unrun)
        if unrun:
            row.extra["not_run"] = [{"graph": b.graph_id, "replaces": b.replaces, "note": b.note} for b in unrun]
        measured = [(b.measured, b.predicted) for b in backend.plans if b.measured and b.predicted]
        if measured:  # what the backend measured of each plan, the replaced ones included
            row.extra["measured_vs_predicted"] = [
                {"graph": b.graph_id, "replaces": b.replaces, "reverted": b.reverted,
                 "in_force": any(b is c for c in plans), "measured_step_ms": m.step_ms,
                 "predicted_step_ms": p.step_ms, "measured_step_peak_gib": (m.step_peak_bytes or 0) / 2**30,
                 "predicted_step_peak_gib": p.step_peak_bytes / 2**30, "stall_ms": m.stall_ms,
                 "peak_phase": m.peak_phase, "holders": m.holders[:3],
                 "host_fw_ms": m.host_fw_ms, "host_bw_ms": m.host_bw_ms, "transfer_ops": list(m.transfer_ops),
                 "queued_ms": list(m.queued_ms), "plan": b.summary()}
                for b in backend.plans if b.measured and b.predicted
                for m, p in [(b.measured, b.predicted)]]
        if predicted:
            total = Predictions.summed(predicted)
            row.extra["predicted_step_ms"] = total["step_ms"]
            row.extra["predicted_baseline_step_ms"] = total["baseline_step_ms"]
            row.extra["predicted_activation_gib"] = total["activation_peak_bytes"] / 2**30
            row.extra["predicted_baseline_activation_gib"] = total["baseline_activation_peak_bytes"] / 2**30
            row.extra["predicted_step_peak_gib"] = total["step_peak_bytes"] / 2**30
            row.extra["hardware"] = backend.plans[0].hardware
        row.extra["offloaded_gib"] = sum(b.offloaded_bytes for b in plans) / 2**30
        row.extra["recomputed"] = sum(len(b.recomputed) for b in plans)
    return row


def back_to_back(step, zero_grad, sync, steps: int) -> float:
    """Milliseconds per step over ``steps`` steps run as a training loop runs them, with
    no synchronisation between them (the host issues the next step while the device
    still runs this one), from a synchronised start to the end of the last one."""
    sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
        zero_grad()
    sync()
    return (time.perf_counter() - t0) * 1e3 / steps


def _prepare(name: str, model, spec: dict[str, Any], row: Row, wrap):
    import torch

    patches: dict[str, Any] = {}
    if name == "eager":
        return wrap(model), patches
    if name == "inductor":
        return _compile(model, spec, wrap), patches
    if name == "inductor-cudagraphs":
        return _compile(model, spec, wrap, mode="reduce-overhead"), patches
    if name in ("full_ac", "sac"):
        wrap_blocks(find_blocks(model, spec.get("blocks")), "full" if name == "full_ac" else "sac")
        return _compile(model, spec, wrap), patches
    if name.startswith("budget:"):
        patches["activation_memory_budget"] = fraction(name.split(":", 1)[1])
        return _compile(model, spec, wrap), patches
    if name == "torch_offload":
        import torch._functorch.config as fconfig

        if not hasattr(fconfig, "enable_activation_offloading"):
            row.status = "unsupported"
            row.note = f"torch {torch.__version__} has no activation offloading"
            return None, patches
        patches["enable_activation_offloading"] = True
        row.note = "SAC with matmul and attention outputs tagged MUST_CPU_OFFLOAD"
        wrap_blocks(find_blocks(model, spec.get("blocks")), "offload")
        return _compile(model, spec, wrap), patches
    if name.startswith(("offload:", "offload-limit:", "offload-cudagraphs:")):
        import offload_compiler

        base, value = name.split(":", 1)
        options = {"per_block": spec.get("compile") == "per-block", **spec.get("offload_options", {}),
                   "devices": (spec["device"].split(":")[0],)}
        if base == "offload-limit":
            options["memory_limit"] = value
        else:
            options["memory_budget"] = budget_from_text(value)
            if options["per_block"] and not isinstance(options["memory_budget"], float) and value != "auto":
                row.note = f"{value} bounds what each block's call holds, not the step"
        if spec["device"].startswith("cpu"):
            options["min_offload_bytes"] = 0
        mode = "reduce-overhead" if base == "offload-cudagraphs" else None
        backend = offload_compiler.make_backend(options, mode=mode)
        compiled = _compile(model, spec, wrap, backend=backend)
        compiled._offload_backend = backend
        return compiled, patches
    raise ValueError(f"unknown strategy {name!r}; valid strategies: {STRATEGY_HELP}")


class patched:
    def __init__(self, patches: dict[str, Any]) -> None:
        self.patches = patches

    def __enter__(self):
        import torch._functorch.config as fconfig

        self.ctx = fconfig.patch(self.patches) if self.patches else None
        if self.ctx:
            self.ctx.__enter__()

    def __exit__(self, *exc):
        if self.ctx:
            self.ctx.__exit__(*exc)
