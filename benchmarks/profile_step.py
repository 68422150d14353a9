"""Where a step's time goes on the GPU, measured, next to what the planner predicted.

    TORCHINDUCTOR_FORCE_DISABLE_CACHES=1 python benchmarks/profile_step.py --preset h100 \
        --configs none,auto,0.2 --out $OUT/profile
    PYTHONPATH=$PWD python benchmarks/profile_step.py --model benchmarks/zoo_models.py:vit \
        --dtype float32 --blocks model.blocks --configs inductor,sac,auto --out $OUT/profile

For each configuration (``inductor`` or ``sac``: plain Inductor, or with SAC saving
matmul and attention outputs; ``none`` / ``all``: the offload backend with that
policy; ``auto`` or a budget such as ``0.2``: ``policy="cost_model"`` with that
``memory_budget``; ``--options`` adds OffloadConfig options): compile the example GPT
(``--preset``) or the model a factory returns (``--model``, as ``interleaved.py`` and
``explain`` take it: its forward returns the loss; ``--dtype`` its weights' dtype,
``--blocks`` the blocks ``sac`` checkpoints), warm up, time ``--steps`` steps, then record ``--profile-steps`` steps with
``torch.profiler`` and read its Chrome trace. Unprofiled figures (the profiler slows
kernels by a few percent, so these are the ones to quote):

- ``step_ms``: median wall time of a step, synchronised after each;
  ``event_step_ms`` / ``event_fw_ms``: the same step and its forward by CUDA events;
  ``back_to_back_ms``: mean step with no synchronisation between steps;
  ``host_fw_ms`` / ``host_bw_ms``: host time to launch forward / backward.

Profiled figures, per step:

- ``compute_busy_ms``: kernel time on the compute stream (the stream with the most
  kernel time), per step; ``compute_idle_ms``: the step's GPU span minus that, the
  time compute waited (for copies, for the host);
- ``fw_gpu_ms`` / ``bw_gpu_ms``: GPU time from the first to the last compute kernel
  launched while the host ran the forward / the backward;
- ``gemm``, ``attention``, ``triton``, ``other``: compute-stream kernel time by kind;
  ``fw_triton``, ``bw_gemm`` and so on: the same for the kernels each phase launched,
  and ``fw_triton_n`` and so on, how many kernels;
- ``d2h_ms`` / ``h2d_ms``: copy time per direction, per step;
- ``fw_kernels`` / ``bw_kernels`` (JSON only): the compute stream's kernels of the
  first profiled step's forward / backward, in launch order, as ``[name, microseconds]``
  (compare two configurations kernel by kernel);
- the planner's predictions for the same graph (step, forward, backward, stall, and
  the baseline step it compared against), its decisions and reasons, and
  ``bw_node_ms``: the cost model's estimate of each backward node, in microseconds;
- ``stalls`` (printed, and in the JSON): the longest waits of the compute stream, with
  the copy that ended at the same moment, if any.

Prints the three longest stalls of each configuration and a table of the figures above
that a comparison reads first (:data:`TABLE`) last; ``--out`` gets one Chrome trace per
configuration and ``profile.json``, with every figure.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch
from tabulate import tabulate

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import offload_compiler  # noqa: E402
from offload_compiler.models.gpt import GPT, PRESETS, make_batch, preset  # noqa: E402


def kernel_kind(name: str) -> str:
    low = name.lower()
    if "flash" in low or "fmha" in low or "attention" in low:
        return "attention"
    if any(k in low for k in ("gemm", "cutlass", "xmma", "nvjet", "matmul", "sm90", "sm100")):
        return "gemm"
    if low.startswith("triton"):
        return "triton"
    return "other"


def _union_ms(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for s, e in sorted(intervals):
        if e <= end:
            continue
        total += e - max(s, end)
        end = e
    return total / 1e3


def analyze_trace(trace: dict, steps: int) -> dict:
    """Per-step figures from a Chrome trace of ``steps`` steps (see the module docstring).

    Host ranges named ``fw`` and ``bw`` (``record_function``) split the kernels by the
    phase that launched them.
    """
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    gpu = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    if not gpu:
        raise ValueError("no GPU events in the trace")
    by_stream: dict[int, float] = defaultdict(float)
    for e in gpu:
        if e["cat"] == "kernel":
            by_stream[e["args"].get("stream")] += e["dur"]
    compute = max(by_stream, key=by_stream.get)
    kernels = [e for e in gpu if e["cat"] == "kernel" and e["args"].get("stream") == compute]
    span = (max(e["ts"] + e["dur"] for e in gpu) - min(e["ts"] for e in gpu)) / 1e3
    busy = _union_ms([(e["ts"], e["ts"] + e["dur"]) for e in kernels])
    kinds: dict[str, float] = defaultdict(float)
    for e in kernels:
        kinds[kernel_kind(e["name"])] += e["dur"] / 1e3
    copies: dict[str, float] = defaultdict(float)
    for e in gpu:
        if e["cat"] == "gpu_memcpy":
            name = e["name"]
            key = "d2h" if "DtoH" in name else "h2d" if "HtoD" in name else "d2d"
            copies[key] += e["dur"] / 1e3
    # Phase of each kernel: the host range ("fw" or "bw") its launch fell in.
    ranges = [(e["name"], e["ts"], e["ts"] + e["dur"]) for e in events
              if e.get("ph") == "X" and e.get("cat") == "user_annotation" and e["name"] in ("fw", "bw")]
    launched = {e["args"]["correlation"]: e["ts"] for e in events
                if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    phase_ms = {"fw": 0.0, "bw": 0.0}
    phase_kinds: dict[str, float] = defaultdict(float)
    sequence: dict[str, list] = {}
    for name, s, t in sorted(ranges, key=lambda r: r[1]):
        mine = [e for e in kernels if s <= launched.get(e["args"].get("correlation"), -1) <= t]
        if name not in sequence:  # the first profiled step's kernels, in launch order
            sequence[name] = [[e["name"], round(e["dur"], 1)] for e in sorted(mine, key=lambda e: e["ts"])]
        if mine:
            phase_ms[name] += (max(e["ts"] + e["dur"] for e in mine) - min(e["ts"] for e in mine)) / 1e3 / steps
        for e in mine:
            phase_kinds[f"{name}_{kernel_kind(e['name'])}"] += e["dur"] / 1e3 / steps
            phase_kinds[f"{name}_{kernel_kind(e['name'])}_n"] += 1 / steps
    # The longest waits of the compute stream, and the copy that ended each, if any.
    t0 = min(e["ts"] for e in kernels)
    ordered = sorted(kernels, key=lambda e: e["ts"])
    memcpys = [e for e in gpu if e["cat"] == "gpu_memcpy"]
    gaps = []
    for a, b in zip(ordered, ordered[1:]):
        start, end = a["ts"] + a["dur"], b["ts"]
        if end - start > 100:
            ended = [c for c in memcpys if abs(c["ts"] + c["dur"] - end) < 20]
            gaps.append({"at_ms": round((start - t0) / 1e3, 2), "ms": round((end - start) / 1e3, 3),
                         "before": b["name"][:60],
                         "copy": ended[0]["name"][:30] if ended else None,
                         "copy_queued_ms": round((ended[0]["dur"]) / 1e3, 2) if ended else None})
    gaps.sort(key=lambda g: -g["ms"])
    return {
        "stalls": gaps[:12],
        "gpu_span_ms": span / steps,
        "compute_busy_ms": busy / steps,
        "compute_idle_ms": (span - busy) / steps,
        "fw_gpu_ms": phase_ms["fw"],
        "bw_gpu_ms": phase_ms["bw"],
        **{k: kinds.get(k, 0.0) / steps for k in ("gemm", "attention", "triton", "other")},
        **{f"{p}_{k}{n}": phase_kinds.get(f"{p}_{k}{n}", 0.0)
           for p in ("fw", "bw") for k in ("gemm", "attention", "triton", "other") for n in ("", "_n")},
        "d2h_ms": copies.get("d2h", 0.0) / steps,
        "h2d_ms": copies.get("h2d", 0.0) / steps,
        "fw_kernels": sequence.get("fw", []),
        "bw_kernels": sequence.get("bw", []),
    }


def _node_costs(plans) -> list:
    """``[name, op, estimated ms]`` of each backward node the cost model prices above
    zero, in graph order (set beside ``bw_kernels``)."""
    from offload_compiler.planning.costs import node_ms
    from offload_compiler.planning.hardware import HardwareProfile

    out = []
    for plan in plans:
        if plan.bw_graph is None or not plan.hardware:
            continue
        hw = HardwareProfile(**plan.hardware)
        for n in plan.bw_graph.graph.nodes:
            ms = node_ms(n, hw)
            if ms > 0:
                out.append([n.name, str(n.target), round(ms * 1e3, 1)])
    return out


def build(config: str, model, dump_dir: Path | None, extra: dict | None = None, blocks: str | None = None):
    """``(compiled, backend or None)`` for one configuration name."""
    from offload_compiler.compare import find_blocks, wrap_blocks

    if config == "inductor":
        return torch.compile(model), None
    if config == "sac":
        wrap_blocks(find_blocks(model, blocks), "sac")
        return torch.compile(model), None
    if config in ("none", "all"):
        options: dict = {"policy": config}
    else:
        options = {"memory_budget": "auto" if config == "auto" else float(config)}
    options.update(extra or {})
    if dump_dir is not None:
        options["dump_dir"] = str(dump_dir / config)
    backend = offload_compiler.make_backend(options)
    return torch.compile(model, backend=backend), backend


def run(config: str, args: argparse.Namespace) -> dict:
    torch._dynamo.reset()
    torch.cuda.empty_cache()
    torch.manual_seed(0)
    model, batch, kwargs = _model(args)
    compiled, backend = build(config, model, args.out, args.options, args.blocks)

    def step() -> None:
        with torch.profiler.record_function("fw"):
            loss = compiled(*batch, **kwargs)
        with torch.profiler.record_function("bw"):
            loss.backward()
        model.zero_grad(set_to_none=True)

    for _ in range(args.warmup + 1):
        step()
    torch.cuda.synchronize()
    times, gpu_times, gpu_fw, cpu_fw, cpu_bw = [], [], [], [], []
    for _ in range(args.steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        start.record()
        loss = compiled(*batch, **kwargs)
        t1 = time.perf_counter()
        mid = torch.cuda.Event(enable_timing=True)
        mid.record()
        loss.backward()
        t2 = time.perf_counter()
        end.record()
        model.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
        gpu_times.append(start.elapsed_time(end))
        gpu_fw.append(start.elapsed_time(mid))
        cpu_fw.append((t1 - t0) * 1e3)
        cpu_bw.append((t2 - t1) * 1e3)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    torch.cuda.synchronize()
    back_to_back = (time.perf_counter() - t0) * 1e3 / args.steps
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(args.profile_steps):
            step()
        torch.cuda.synchronize()
    trace_path = (args.out or Path(".")) / f"trace_{config}.json"
    trace_path.parent.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(trace_path))
    row = {"config": config, "step_ms": statistics.median(times),
           "event_step_ms": statistics.median(gpu_times),
           "event_fw_ms": statistics.median(gpu_fw),
           "back_to_back_ms": back_to_back,
           "host_fw_ms": statistics.median(cpu_fw), "host_bw_ms": statistics.median(cpu_bw)}
    row.update(analyze_trace(json.loads(trace_path.read_text()), args.profile_steps))
    if backend is not None and backend.plans:
        pred = [p.predicted for p in backend.plans if p.predicted]
        sims = [p.simulation for p in backend.plans if p.simulation is not None]
        row["pred_step_ms"] = sum(p.get("step_ms", 0.0) for p in pred)
        row["pred_base_ms"] = sum(p.get("baseline_step_ms", 0.0) for p in pred)
        row["pred_fw_ms"] = sum(s.fw_ms for s in sims)
        row["pred_bw_ms"] = sum(s.bw_ms for s in sims)
        row["pred_stall_ms"] = sum(s.stall_ms for s in sims)
        row["offloaded_gib"] = sum(p.offloaded_bytes for p in backend.plans) / 2**30
        row["recomputed"] = sum(len(p.recomputed) for p in backend.plans)
        row["hardware"] = backend.plans[0].hardware
        row["decisions"] = {d.name: d.decision.value for p in backend.plans for d in p.decisions
                            if d.decision.value != "keep"}
        row["reasons"] = {d.name: d.reason for p in backend.plans for d in p.decisions
                          if d.decision.value != "keep"}
        row["bw_node_ms"] = _node_costs(backend.plans)
    return row


def _model(args: argparse.Namespace):
    """``(model, args, kwargs)`` on the GPU: the example GPT preset in bfloat16, or the
    model ``--model`` returns in ``--dtype``, its inputs moved to the GPU."""
    if args.model is None:
        cfg = preset(args.preset)
        return GPT(cfg).cuda().to(torch.bfloat16), make_batch(cfg, "cuda"), {}
    from torch.utils import _pytree as pytree

    from offload_compiler.reporting.explain_cli import load_factory, split_inputs

    model, inputs = load_factory(args.model)()
    batch, kwargs = pytree.tree_map_only(torch.Tensor, lambda t: t.cuda(), split_inputs(inputs))
    return model.cuda().to(getattr(torch, args.dtype)), batch, kwargs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="h100", choices=sorted(PRESETS))
    p.add_argument("--model", default=None,
                   help="module:function or file.py:function returning (model, inputs), instead of --preset")
    p.add_argument("--dtype", default="bfloat16", help="--model's weights' dtype (float32 for models under autocast)")
    p.add_argument("--blocks", default=None,
                   help="dotted path of --model's repeated blocks, for sac (default: the largest nn.ModuleList)")
    p.add_argument("--configs", default="none,auto",
                   help="comma-separated: inductor, sac, none, all, auto, or a budget fraction")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--profile-steps", type=int, default=2)
    p.add_argument("--options", type=json.loads, default=None,
                   help='extra OffloadConfig options for the offload configurations, as JSON: '
                        '\'{"node_costs": "profile"}\'')
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("this benchmark needs a CUDA device")
    rows = [run(c, args) for c in args.configs.split(",")]
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "model": args.model or f"GPT preset {args.preset}", "command": " ".join(sys.argv)}
    if args.out:
        (args.out / "profile.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    print(json.dumps(meta))
    for r in rows:
        for g in r.get("stalls", [])[:3]:
            print(r["config"], "stall", g)
    # The columns a comparison reads first; every figure is in the JSON (--out).
    print(tabulate([[r.get(k, "") for k in TABLE] for r in rows], headers=TABLE, floatfmt=".2f"))


#: The printed table's columns (a command's output is read from its tail, which has room for few).
TABLE = ("config", "step_ms", "back_to_back_ms", "host_fw_ms", "host_bw_ms", "compute_busy_ms", "fw_gemm",
         "fw_triton", "bw_gemm", "bw_attention", "bw_triton", "bw_triton_n", "d2h_ms", "h2d_ms",
         "pred_step_ms", "pred_base_ms", "recomputed", "offloaded_gib")


if __name__ == "__main__":
    main()
