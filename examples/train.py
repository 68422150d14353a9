"""Train the example GPT with ``torch.compile(backend="offload")``.

    python examples/train.py                       # tiny model on CPU (loopback copies)
    python examples/train.py --preset h100 --device cuda --dtype bfloat16

Prints a line before the first step (it compiles: Dynamo traces, the backend plans,
Inductor compiles; the planner's phases are logged as they go) and one after it, the
loss of every later step (or of every ``--log-every`` steps), then what was offloaded,
the median step time and, on a GPU, the peak memory.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time

import torch

import offload_compiler  # noqa: E402  (registers backend="offload")
from offload_compiler.config import budget_from_text  # noqa: E402
from offload_compiler.models.gpt import GPT, PRESETS, make_batch, preset  # noqa: E402

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class _Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    pass


def _budget(text: str):
    try:
        return budget_from_text(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _device(text: str) -> str:
    try:
        kind = torch.device(text).type
    except RuntimeError:
        kind = None
    if kind not in ("cpu", "cuda"):
        raise argparse.ArgumentTypeError(f"{text!r} is not cpu, cuda or cuda:N")
    return text


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 1")
    return int(text)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=_Formatter)
    p.add_argument("--preset", default="tiny", choices=sorted(PRESETS), help="example GPT size")
    p.add_argument("--device", default="cpu", type=_device, help="cpu, cuda or cuda:N")
    p.add_argument("--dtype", default=None, choices=sorted(DTYPES),
                   help="parameter dtype (None: float32 on CPU, bfloat16 on CUDA)")
    p.add_argument("--steps", type=_positive, default=5, help="training steps")
    p.add_argument("--log-every", type=_positive, default=1,
                   help="print the loss every N steps after the first (and the last step's)")
    p.add_argument("--policy", default="cost_model", choices=["cost_model", "all", "none"],
                   help="the backend's policy")
    p.add_argument("--memory-budget", type=_budget, default="auto",
                   help='"auto", a fraction in (0, 1] of the activation peak (1.0 changes '
                        'nothing), or bytes with a unit, e.g. 512MiB')
    p.add_argument("--inner-compiler", default="inductor", choices=["inductor", "eager"],
                   help="compiler of the rewritten graphs")
    p.add_argument("--min-offload-bytes", type=int, default=None,
                   help="smaller activations stay put (None: the backend's 1 MiB on "
                        "CUDA, 0 on CPU so the tiny model offloads something)")
    p.add_argument("--dropout", type=float, default=None, help="None: the preset's")
    p.add_argument("--lr", type=float, default=1e-3, help="AdamW learning rate")
    p.add_argument("-v", "--verbose", action="store_true", help="log every decision")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(levelname)s %(name)s: %(message)s")
    device = torch.device(args.device)
    dtype = DTYPES[args.dtype] if args.dtype else (torch.bfloat16 if device.type == "cuda" else torch.float32)
    overrides = {} if args.dropout is None else {"dropout": args.dropout}
    cfg = preset(args.preset, **overrides)
    torch.manual_seed(0)
    model = GPT(cfg).to(device=device, dtype=dtype)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, foreach=True)

    options = {"policy": args.policy, "inner_compiler": args.inner_compiler,
               "devices": (device.type,), "memory_budget": args.memory_budget}
    if args.min_offload_bytes is not None:
        options["min_offload_bytes"] = args.min_offload_bytes
    elif device.type == "cpu":
        options["min_offload_bytes"] = 0
    backend = offload_compiler.make_backend(options)
    compiled = torch.compile(model, backend=backend)

    idx, targets = make_batch(cfg, device)
    times, losses = [], []
    print(f"step 0: compiling: Dynamo traces, the offload backend plans ({args.policy}, "
          f"memory_budget={args.memory_budget!r}), {args.inner_compiler} compiles; the first step "
          "takes longer", flush=True)
    for step in range(args.steps):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = compiled(idx, targets)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
        losses.append(loss.item())
        if step == 0:
            print(f"step 0: loss {losses[-1]:.4f}  {times[-1] / 1e3:.1f} s (compile and first step)",
                  flush=True)
        elif step % args.log_every == 0 or step == args.steps - 1:
            print(f"step {step}: loss {losses[-1]:.4f}  {times[-1]:.1f} ms", flush=True)

    offloaded = sum(p.offloaded_bytes for p in backend.plans)
    steady = times[1:] or times
    result = {"losses": losses, "step_ms": statistics.median(steady), "offloaded_bytes": offloaded}
    for plan in backend.plans:
        print(plan.summary())
    if not backend.plans and args.policy != "none":
        print("no plan recorded: the graphs came from Inductor's cache, so the partitioner did "
              "not run (set TORCHINDUCTOR_FORCE_DISABLE_CACHES=1 to plan afresh)")
    print(f"offloaded {offloaded / 2**20:.1f} MiB per step in {len(backend.plans)} graph(s); "
          f"median step {result['step_ms']:.1f} ms (first step, with compilation, excluded)")
    if device.type == "cuda":
        result["peak_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
        print(f"peak allocated {result['peak_gib']:.2f} GiB")
    return result


if __name__ == "__main__":
    main()
