"""Dynamic sequence lengths: activation memory at the longest, against a static compile.

    python benchmarks/dynamic_shapes.py --out $OUT/dynamic

A Llama-style model (Hugging Face ``LlamaForCausalLM``, random weights, if
``transformers`` imports; else the example GPT's ``h100`` preset, scaled down) is
trained on ten lengths from 512 to 4096 in rising order under ``backend="offload"``
(``memory_budget`` as given, ``"auto"`` by default). Dynamo makes the length dynamic at
the second one, so every later length runs one graph; the backend plans it again when
a length is far past the one planned for (``offload_compiler/planning/sizes.py``).
Then, from the same weights, a static compile at the longest length under the same
options, and Inductor without offloading at that length.

For each run, one more step at the longest length after the compiles: activation
memory (CUDA peak minus what was allocated before forward, gradients of the step
included) and the gradients. Prints a table last: Dynamo graphs compiled, plans made
(inner compiles) and re-plans, activation memory at the longest length against the
static compile, and the gradients' agreement with Inductor without offloading (max
over parameters of max |g - g_ref| / max |g_ref|). ``--out`` writes JSON there.

``--device cpu`` runs the same loop on the tiny GPT in loopback mode (no memory
figures), to check the script without a GPU.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import offload_compiler  # noqa: E402
from offload_compiler.config import budget_from_text  # noqa: E402
from offload_compiler.models.gpt import GPT, preset  # noqa: E402
from offload_compiler.planning.sizes import PlanPerSize  # noqa: E402


def lengths(shortest: int, longest: int, count: int, multiple: int = 64) -> list[int]:
    """``count`` lengths from ``shortest`` to ``longest``, evenly spaced, rounded to
    ``multiple``."""
    step = (longest - shortest) / (count - 1)
    return [int(round((shortest + i * step) / multiple)) * multiple for i in range(count)]


def make_model(args: argparse.Namespace) -> tuple[torch.nn.Module, str, int]:
    """``(model, description, vocabulary size)``, on the device in the dtype, seeded."""
    torch.manual_seed(0)
    dtype = getattr(torch, args.dtype)
    if args.device == "cpu":
        cfg = preset("tiny", seq_len=args.longest)
        return GPT(cfg).to(dtype), "example GPT tiny (CPU loopback)", cfg.vocab_size
    if args.model in ("auto", "llama"):
        try:
            from transformers import LlamaConfig, LlamaForCausalLM
        except ImportError:
            if args.model == "llama":
                raise
        else:
            cfg = LlamaConfig(vocab_size=32000, hidden_size=args.width, intermediate_size=int(args.width * 2.75),
                              num_hidden_layers=args.layers, num_attention_heads=args.width // 128,
                              num_key_value_heads=args.width // 128, max_position_embeddings=args.longest,
                              attn_implementation="sdpa", use_cache=False)
            model = LlamaForCausalLM(cfg).to(device=args.device, dtype=dtype)
            return model, f"LlamaForCausalLM {args.layers} layers, width {args.width}", cfg.vocab_size
    cfg = preset("h100", n_layers=args.layers, d_model=args.width, seq_len=args.longest)
    return (GPT(cfg).to(device=args.device, dtype=dtype),
            f"example GPT h100 preset, {args.layers} layers, width {args.width}", cfg.vocab_size)


def batch(length: int, vocab: int, args: argparse.Namespace) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(length)
    data = torch.randint(vocab, (args.batch, length + 1), generator=g)
    return data[:, :-1].contiguous().to(args.device), data[:, 1:].contiguous().to(args.device)


def loss_of(compiled, model: torch.nn.Module, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    if isinstance(model, GPT):
        return compiled(ids, targets)
    return compiled(input_ids=ids, labels=ids).loss  # Hugging Face shifts the labels itself


class Counting:
    """A backend (the offload backend with ``options``, or ``inner`` such as Inductor),
    counting what Dynamo hands it and what it returns."""

    def __init__(self, options: dict | None, inner=None) -> None:
        self.backend = offload_compiler.make_backend(**options) if inner is None else inner
        self.returned: list = []

    def __call__(self, gm, example_inputs):
        self.returned.append(self.backend(gm, example_inputs))
        return self.returned[-1]

    def counts(self) -> dict:
        per_size = [r for r in self.returned if isinstance(r, PlanPerSize)]
        if not hasattr(self.backend, "plans"):
            return {"dynamo_graphs": len(self.returned)}
        return {"dynamo_graphs": len(self.returned),
                "plans": len(self.backend.plans),
                "replans": sum(len(r.planned) - 1 for r in per_size),
                "planned_sizes": [r.planned for r in per_size]}


def step(compiled, model, length: int, vocab: int, args: argparse.Namespace, *, measure: bool = False) -> dict:
    model.zero_grad(set_to_none=True)
    ids, targets = batch(length, vocab, args)
    cuda = args.device == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated() if cuda else 0
    t0 = time.perf_counter()
    loss_of(compiled, model, ids, targets).backward()
    if cuda:
        torch.cuda.synchronize()
    out = {"length": length, "wall_s": time.perf_counter() - t0}
    if measure:
        out["act_gib"] = (torch.cuda.max_memory_allocated() - before) / 2**30 if cuda else None
        out["grads"] = [p.grad.detach().float().cpu() for p in model.parameters() if p.grad is not None]
    return out


def run(name: str, base: torch.nn.Module, vocab: int, seq: list[int], backend, args, *, dynamic) -> dict:
    torch._dynamo.reset()
    if args.device == "cuda":
        torch.cuda.empty_cache()
    model = copy.deepcopy(base)
    compiled = torch.compile(model, backend=backend, dynamic=dynamic)
    t0 = time.perf_counter()
    steps = [step(compiled, model, t, vocab, args) for t in seq]
    print(f"{name}: lengths {seq} in {time.perf_counter() - t0:.0f} s "
          f"(first step {steps[0]['wall_s']:.0f} s)", flush=True)
    last = step(compiled, model, seq[-1], vocab, args, measure=True)
    result = {"run": name, "lengths": seq, "step_wall_s": [s["wall_s"] for s in steps],
              "act_gib": last["act_gib"], "grads": last["grads"]}
    if isinstance(backend, Counting):
        result.update(backend.counts())
    return result


def max_relative_difference(grads: list[torch.Tensor], ref: list[torch.Tensor]) -> float:
    return max(((g - r).abs().max() / r.abs().max().clamp_min(1e-30)).item() for g, r in zip(grads, ref))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="auto", choices=("auto", "llama", "gpt"),
                   help="auto: Llama if transformers imports, else the example GPT")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--shortest", type=int, default=512)
    p.add_argument("--longest", type=int, default=4096)
    p.add_argument("--count", type=int, default=10, help="lengths, from shortest to longest")
    p.add_argument("--budget", default="auto",
                   help='memory_budget: "auto", a fraction (0.5, 1.0) or bytes with a unit (12GiB)')
    p.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--out", default=None, help="folder for dynamic_shapes.json")
    args = p.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("dynamic_shapes.py needs CUDA (or --device cpu for a check of the loop)", file=sys.stderr)
        return 2
    if args.device == "cpu":
        args.shortest, args.longest, args.dtype = min(args.shortest, 32), min(args.longest, 256), "float32"
    options = {"memory_budget": budget_from_text(args.budget)}
    if args.device == "cpu":
        options.update(devices=("cpu",), min_offload_bytes=0)
    seq = lengths(args.shortest, args.longest, args.count, 64 if args.device == "cuda" else 16)
    base, described, vocab = make_model(args)
    print(f"{described}, batch {args.batch}, {args.dtype}, options {options}", flush=True)

    runs = [
        run("offload, rising lengths", base, vocab, seq, Counting(options), args, dynamic=None),
        run(f"offload, static {seq[-1]}", base, vocab, [seq[-1]], Counting(options), args, dynamic=False),
        run(f"inductor, static {seq[-1]}", base, vocab, [seq[-1]], "inductor", args, dynamic=False),
        run("inductor, rising lengths", base, vocab, seq,
            Counting(None, torch._dynamo.lookup_backend("inductor")), args, dynamic=None),
    ]
    ref, static = runs[2], runs[1]
    for r in runs:
        r["grad_max_rel_diff"] = max_relative_difference(r["grads"], ref["grads"])
        r["act_vs_static"] = (r["act_gib"] / static["act_gib"]) if r["act_gib"] and static["act_gib"] else None
    for r in runs:
        del r["grads"]
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "dynamic_shapes.json").write_text(json.dumps(
            {"model": described, "args": vars(args), "options": {k: str(v) for k, v in options.items()},
             "torch": torch.__version__,
             "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu", "runs": runs},
            indent=1))

    def fmt(x, spec):
        return "n/a" if x is None else format(x, spec)

    header = ["run", "Dynamo graphs", "plans", "re-plans", f"act GiB at {seq[-1]}", "vs static offload",
              "grad max rel diff vs inductor"]
    rows = [[r["run"], r.get("dynamo_graphs", "-"), r.get("plans", "-"), r.get("replans", "-"),
             fmt(r["act_gib"], ".2f"), fmt(r["act_vs_static"], ".2f"), f"{r['grad_max_rel_diff']:.2e}"]
            for r in runs]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    for line in [header, ["-" * w for w in widths], *rows]:
        print("  ".join(str(x).ljust(w) for x, w in zip(line, widths)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
