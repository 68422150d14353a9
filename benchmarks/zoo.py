"""The model zoo: the comparison harness on models nobody here wrote.

    python benchmarks/zoo.py --list
    python benchmarks/zoo.py --models llama,vit --out out/zoo --budget-seconds 540 --timeout 150
    python benchmarks/zoo.py --models tiny_gpt --device cpu --strategies inductor,offload:auto \
        --steps 1 --warmup 0 --out out/zoo

Runs ``offload_compiler.compare`` on each model of ``--models`` (factories in
``benchmarks/zoo_models.py``: Hugging Face Llama, compiled whole and one decoder layer at
a time, timm ViT-B/16, torchvision ResNet-50, the example GPT), one strategy at a time,
each in its own process. Per model the
default strategies are ``inductor``, ``sac`` and ``full_ac`` (where they apply),
``budget:0.5``, ``offload:auto``, ``offload:0.5``, ``offload-limit:FULL`` and
``offload-limit:MID``: this backend with ``memory_limit`` = full checkpointing's
measured peak (the row at full checkpointing's memory: its peak, and so its activation
memory, at most full checkpointing's when the limit holds), and halfway between
Inductor's and full checkpointing's peaks. Models compiled one block at a time
(``llama_blocks``) leave both out: there a budget bounds each block's call, and neither
step figure translates into one.

Each model's rows go to ``OUT/<model>/`` (``compare.json``, ``.svg``, ``.txt`` and one
log per strategy, rewritten after every row) and all of them to ``OUT/zoo.json``. A
line is printed as each row starts, and one table per model at the end: step ratio to
Inductor, activation GiB and its ratio to SAC's (Inductor's where SAC does not apply),
compile seconds (the first step, with cold caches unless ``--caches warm``: see
``compare``) and whether loss and gradient norm agree with the first row.
``--budget-seconds`` stops starting rows once that much time has passed (a lent GPU
gives 10 minutes per command) and lists the rows not run. ``--offload-options`` passes
backend options to every offload row (``'{"max_host_bytes": 0}'``: recomputation only).
The ``host ms`` column is the host's time to issue a synchronised step: near the step,
the host sets the pace.

``--list`` imports no torch: it runs where transformers, timm and torchvision are not
installed, as does ``tiny_gpt``. The other factories import them when called.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # this checkout's offload_compiler, also in the row processes
    sys.path.insert(0, str(ROOT))

FULL = "offload-limit:FULL"
MID = "offload-limit:MID"
FULL_NOTE = ("offload-limit:FULL: memory_limit = full_ac's measured peak GiB (the whole step, "
             "parameters and optimizer included): the row is at full checkpointing's memory "
             "when its peak GiB is at most full_ac's")
MID_NOTE = ("offload-limit:MID: memory_limit = the midpoint of inductor's and full_ac's measured "
            "peak GiB (the whole step, parameters and optimizer included): the limit is met "
            "when this row's peak GiB is at most it")
#: What each derived row stands for, printed with the rows and under the tables.
NOTES = {FULL: FULL_NOTE, MID: MID_NOTE}
NOT_RUN = "not run"
BASES = ("eager", "inductor", "full_ac", "sac", "budget", "torch_offload", "offload")
STRATEGY_HELP = ("eager, inductor, full_ac, sac, budget:B, torch_offload, offload:auto, "
                 f"offload:B, offload-limit:L (L bytes with a unit), {FULL}, {MID} (B a fraction in (0, 1])")


@dataclass(frozen=True)
class ZooModel:
    """One model of the zoo, as the comparison harness runs it."""

    name: str
    """What ``--models`` calls it."""
    factory: str
    """``module:function`` returning ``(model, batch)``; imported in each row's process."""
    dtype: str
    """What the harness casts the weights to."""
    compute_dtype: str
    """The precision the step computes in (bf16 under autocast): sets the tolerance of
    the loss and gradient-norm agreement."""
    blocks: str
    """Dotted path of the repeated blocks that ``sac`` and ``full_ac`` checkpoint."""
    about: str
    """One line for ``--list``."""
    needs: str = ""
    """Packages the factory imports beyond torch, comma-separated."""
    no_sac: str = ""
    """Why ``sac`` is left out of the defaults (empty: it applies)."""
    compile: str = "whole"
    """``"whole"``: the model compiled as one; ``"per-block"``: each block compiled on its
    own (as torchtitan does), every strategy (``compare --compile per-block``)."""

    def default_strategies(self) -> list[str]:
        sac = [] if self.no_sac else ["sac"]
        # Per block, a budget bounds each block's call: full checkpointing's step memory
        # (FULL) and halfway to it (MID) do not translate into one (yet).
        derived = [] if self.compile == "per-block" else [FULL, MID]
        return ["inductor", *sac, "full_ac", "budget:0.5", "offload:auto", "offload:0.5", *derived]

    @property
    def reference(self) -> str:
        """The strategy whose activation memory the table divides by."""
        return "inductor" if self.no_sac else "sac"


MODELS = {m.name: m for m in (
    ZooModel("llama", "benchmarks.zoo_models:llama", "bfloat16", "bfloat16", "lm.model.layers",
             "HF LlamaForCausalLM, 8 layers, width 2048, MLP 5632, vocab 32000, SDPA; "
             "batch 4 x 4096 tokens, bf16", needs="transformers"),
    ZooModel("llama_blocks", "benchmarks.zoo_models:llama", "bfloat16", "bfloat16", "lm.model.layers",
             "HF LlamaForCausalLM as llama, each decoder layer compiled on its own (as "
             "torchtitan does) in every strategy", needs="transformers", compile="per-block"),
    ZooModel("vit", "benchmarks.zoo_models:vit", "float32", "bfloat16", "model.blocks",
             "timm vit_base_patch16_224; batch 96 x 3x224x224, bf16 autocast, fp32 weights",
             needs="timm"),
    ZooModel("resnet50", "benchmarks.zoo_models:resnet50", "float32", "bfloat16", "bottlenecks",
             "torchvision resnet50, channels_last; batch 128 x 3x224x224, bf16 autocast, "
             "fp32 weights", needs="torchvision",
             no_sac="SAC's policy saves matmul and attention outputs and a bottleneck has "
                    "neither, so it would recompute what full_ac does; activation ratios "
                    "are to inductor"),
    ZooModel("gpt", "benchmarks.zoo_models:gpt", "bfloat16", "bfloat16", "blocks",
             "the example GPT, h100 preset (8 layers, width 2048, batch 4 x 4096 tokens), bf16"),
    ZooModel("tiny_gpt", "benchmarks.zoo_models:tiny_gpt", "float32", "float32", "blocks",
             "the example GPT, tiny preset: a CPU smoke test"),
    ZooModel("tiny_gpt_blocks", "benchmarks.zoo_models:tiny_gpt", "float32", "float32", "blocks",
             "the example GPT, tiny preset, each block compiled on its own: a CPU smoke test",
             compile="per-block"),
)}


def _peaks(rows: list, strategy: str) -> dict[str, float]:
    """The ``inductor`` and ``full_ac`` rows' measured peaks (GiB) that ``strategy``
    derives its limit from; ``ValueError`` saying why when they cannot be had."""
    by_name = {r.strategy: r for r in rows}
    for name in ("inductor", "full_ac"):
        r = by_name.get(name)
        if r is None or r.status != "ok":
            got = "not run" if r is None else f"{r.status}: {r.note}".rstrip(": ")
            raise ValueError(f"{strategy} needs a measured {name} row ({got})")
        if r.peak_gib is None:
            raise ValueError(f"{strategy} needs the {name} row's peak, measured on CUDA only")
    return {name: by_name[name].peak_gib for name in ("inductor", "full_ac")}


def full_limit(rows: list) -> str:
    """``offload-limit:FULL``'s ``memory_limit``: the ``full_ac`` row's measured peak, in
    MiB rounded down."""
    return f"{int(_peaks(rows, FULL)['full_ac'] * 1024)}MiB"


def mid_limit(rows: list) -> str:
    """``offload-limit:MID``'s ``memory_limit``: halfway between the ``inductor`` and
    ``full_ac`` rows' measured peaks, in MiB rounded down."""
    peaks = _peaks(rows, MID)
    return f"{int((peaks['inductor'] + peaks['full_ac']) / 2 * 1024)}MiB"


#: Strategies whose argument comes from rows of the same model run before them.
DERIVED: dict[str, Callable[[list], str]] = {
    FULL: lambda rows: f"offload-limit:{full_limit(rows)}",
    MID: lambda rows: f"offload-limit:{mid_limit(rows)}",
}


def derive(model: ZooModel, strategy: str, rows: list) -> str:
    """The strategy a ``DERIVED`` one stands for on ``model``, from its rows measured so
    far; ``ValueError`` with the reason where it cannot be derived (a row it needs did
    not run, or ``model`` is compiled one block at a time, where a budget bounds each
    block's call and a step figure does not translate into one)."""
    if model.compile == "per-block":
        raise ValueError("compiled one block at a time, a budget bounds each "
                         "block's call: a step figure does not translate into one")
    return DERIVED[strategy](rows)


def check_strategy(name: str) -> None:
    """Refuses a strategy the harness would not know, naming the valid ones."""
    if name.startswith("offload-limit:"):  # FULL, MID, or bytes the harness checks
        return
    base, _, arg = name.partition(":")
    ok = base in BASES and (bool(arg) == (base in ("budget", "offload")))
    if ok and arg and not (base == "offload" and arg == "auto"):
        from offload_compiler.compare.run import fraction

        try:  # as the harness reads it: a float in (0, 1], "1" refused (write 1.0)
            ok = fraction(arg) > 0
        except ValueError:
            ok = False
    if not ok:
        raise ValueError(f"unknown strategy {name!r}; valid strategies: {STRATEGY_HELP}")


def check_order(strategies: list[str]) -> None:
    for derived in NOTES:
        if derived in strategies:
            before = strategies[:strategies.index(derived)]
            missing = [s for s in ("inductor", "full_ac") if s not in before]
            if missing:
                raise ValueError(f"{derived} is run after the rows it is computed from: list "
                                 f"{' and '.join(missing)} before it")


@dataclass
class Settings:
    """What every row shares: the command line's device, steps, warm-up, per-row
    timeout (seconds), output folder and wall-time budget (seconds, ``None``: none)."""

    device: str
    steps: int
    warmup: int
    timeout_s: float
    out: Path
    budget_s: float | None = None
    dump: bool = False
    """Offload rows dump their graphs, plans and measurements under ``OUT/<model>/dump/``."""
    caches: str = "cold"
    """``compare``'s ``caches``: each row's first step with empty compile caches, or warm."""
    offload_options: dict | None = None
    """Extra ``OffloadConfig`` options of the ``offload:*`` rows (``--offload-options``)."""


def run_row(model: ZooModel, strategy: str, settings: Settings):
    """One row of the harness, in its own process; its log goes to ``OUT/<model>/``."""
    from offload_compiler.compare import compare

    dump = settings.out / model.name / "dump" / strategy.replace(":", "_")
    options = {**(settings.offload_options or {}), **({"dump_dir": str(dump)} if settings.dump else {})}
    (row,) = compare(preset=None, model=model.factory, device=settings.device, dtype=model.dtype,
                     steps=settings.steps, warmup=settings.warmup, strategies=[strategy],
                     blocks=model.blocks, out=settings.out / model.name, compile_mode=model.compile,
                     timeout_s=settings.timeout_s, caches=settings.caches,
                     offload_options=options or None)
    return row


def run_zoo(plan: dict[str, list[str]], settings: Settings, *,
            run: Callable = run_row, clock: Callable[[], float] = time.monotonic) -> dict[str, list]:
    """Every model of ``plan`` (name to its strategies), row by row; returns the rows by
    model. Rows past ``settings.budget_s`` are kept with status ``"not run"``."""
    from offload_compiler.compare import Row

    start = clock()
    results: dict[str, list] = {}
    for name, strategies in plan.items():
        model = MODELS[name]
        rows = results[name] = []
        say(f"zoo: {name} ({model.dtype}, blocks at {model.blocks}): {', '.join(strategies)}")
        missing = missing_packages(model)
        if missing:
            say(f"zoo: {name}: not run: {missing}")
        for strategy in strategies:
            if missing:
                rows.append(Row(strategy=strategy, status=NOT_RUN, note=missing))
                continue
            if settings.budget_s is not None and clock() - start >= settings.budget_s:
                rows.append(Row(strategy=strategy, status=NOT_RUN,
                                note=f"--budget-seconds {settings.budget_s:g} spent"))
                continue
            actual = strategy
            if strategy in DERIVED:  # computed from rows already measured
                try:
                    actual = derive(model, strategy, rows)
                except ValueError as e:
                    say(f"zoo: {name}: {strategy} not run: {e}")
                    rows.append(Row(strategy=strategy, status=NOT_RUN, note=str(e)))
                    _write(results, settings)
                    continue
                say(f"zoo: {name}: {strategy} is {actual} ({NOTES[strategy].split(': ', 1)[1]})")
            say(f"zoo: {name}: {actual} ...")
            row = run(model, actual, settings)
            if strategy in DERIVED:
                row.note = f"{strategy}; {row.note}".rstrip("; ")
                row.extra["zoo_strategy"] = strategy
            rows.append(row)
            _flag_agreement(rows, model)
            say(f"zoo: {name}: {actual} {row.status}" + _summary(row))
            _write(results, settings)
    _write(results, settings)  # with the rows the budget left out
    return results


def missing_packages(model: ZooModel) -> str:
    """Why ``model``'s factory cannot be called here ("" if it can): the packages it
    imports that this interpreter, which also runs the rows, does not have."""
    import importlib.util

    gone = [p for p in model.needs.split(",") if p and importlib.util.find_spec(p) is None]
    return f"{', '.join(gone)} not installed" if gone else ""


def _flag_agreement(rows: list, model: ZooModel) -> None:
    # The harness's rule (loss and gradient norm against the first ok row), at the
    # tolerance of the precision the step computes in, which autocast makes bf16.
    from offload_compiler.compare.harness import _flag_disagreements

    _flag_disagreements(rows, model.compute_dtype)


def _summary(row) -> str:
    if row.status != "ok":
        return f": {row.note}" if row.note else ""
    act = "" if row.activation_gib is None else f", act {row.activation_gib:.2f} GiB"
    return f": {row.step_ms:.1f} ms{act}, compile {row.compile_s:.1f} s"


def _write(results: dict[str, list], settings: Settings) -> None:
    """``OUT/<model>/compare.*`` with every row so far, and ``OUT/zoo.json``."""
    import torch

    from offload_compiler.compare import write_outputs

    models = {}
    for name, rows in results.items():
        model = MODELS[name]
        spec = {"device": settings.device, "dtype": model.dtype, "preset": None,
                "model": model.factory, "steps": settings.steps}
        write_outputs(rows, settings.out / name, spec)
        models[name] = {"factory": model.factory, "dtype": model.dtype,
                        "compute_dtype": model.compute_dtype, "blocks": model.blocks,
                        "reference": model.reference, "no_sac": model.no_sac,
                        "rows": [asdict(r) for r in rows]}
    meta = {"torch": torch.__version__, "device": settings.device, "steps": settings.steps,
            "warmup": settings.warmup, "timeout_s": settings.timeout_s,
            "budget_seconds": settings.budget_s, "command": " ".join(sys.argv)}
    if settings.device.startswith("cuda") and torch.cuda.is_available():
        meta["gpu"] = torch.cuda.get_device_name()
    not_run = [{"model": name, "strategy": r.strategy, "reason": r.note}
               for name, rows in results.items() for r in rows if r.status == NOT_RUN]
    (settings.out / "zoo.json").write_text(json.dumps(
        {"meta": meta, "models": models, "not_run": not_run, "full_note": FULL_NOTE}, indent=2))


def model_table(model: ZooModel, rows: list) -> str:
    from tabulate import tabulate

    ok = {r.strategy: r for r in rows if r.status == "ok"}
    reference = model.reference if model.reference in ok else "inductor"
    base, ref = ok.get("inductor"), ok.get(reference)

    def ratio(x, y):
        return "" if x is None or y is None or y == 0 else f"{x / y:.3f}"

    full = ok.get("full_ac")  # the rows at its memory are read against its step
    body = [[_label(r), r.status, _f(r.step_ms, 1), _f(r.extra.get("host_step_ms"), 1),
             ratio(r.step_ms, base and base.step_ms)]
            + ([ratio(r.step_ms, full.step_ms)] if full else [])
            + [_f(r.activation_gib, 2), ratio(r.activation_gib, ref and ref.activation_gib),
               _f(r.peak_gib, 2), _f(r.extra.get("predicted_step_ms"), 1),
               _f(r.extra.get("predicted_step_peak_gib"), 2), r.extra.get("replanned", ""),
               _f(r.compile_s, 1), r.agrees, r.note[:60]] for r in rows]
    headers = (["strategy", "status", "step ms", "host ms", "x inductor step"]
               + (["x full_ac step"] if full else [])
               + ["act GiB", f"x {reference} act", "peak GiB", "pred ms", "pred act GiB", "replans",
                  "compile s", "agrees", "note"])
    lines = [f"== {model.name}: {model.about} ==", tabulate(body, headers=headers)]
    if model.no_sac:
        lines.append(f"sac: {model.no_sac}")
    elif reference != model.reference:
        lines.append(f"x inductor act: no measured {model.reference} row to compare with")
    for derived, note in NOTES.items():
        if any(r.strategy == derived or r.extra.get("zoo_strategy") == derived for r in rows):
            lines.append(note)
    lines.append("host ms: the host's time to issue a synchronised step (median); near the step, "
                 "the host sets the pace")
    for r in rows:
        if (r.extra.get("gc") or {}).get("collections"):
            lines.append(f"{_label(r)}: {r.extra['gc']['collections']} garbage collections took "
                         f"{r.extra['gc']['ms']:.1f} ms over the measured steps")
    for r in rows:
        for m in r.extra.get("measured_vs_predicted", []):
            lines.append(
                f"{_label(r)}: graph {m['graph']}{_replanned(m)}: "
                f"measured {m['measured_step_ms']:.1f} ms / {m['measured_step_peak_gib']:.2f} GiB "
                f"(peak in {m['peak_phase']}), predicted {m['predicted_step_ms']:.1f} ms / "
                f"{m['predicted_step_peak_gib']:.2f} GiB")
        for m in r.extra.get("not_run", []):
            lines.append(f"{_label(r)}: graph {m['graph']} (re-planned, compiled; {m['note']})")
    for r in rows:  # the model's own baseline, against which "auto" holds max_overhead
        predicted = r.extra.get("predicted_baseline_step_ms")
        if r.status == "ok" and predicted and base and base.step_ms and r.extra.get("measured_vs_predicted"):
            line = (f"{_label(r)}: step with nothing moved {predicted:.1f} ms as the backend predicts "
                    f"it, {base.step_ms:.1f} ms as the inductor row measured it "
                    f"({(predicted / base.step_ms - 1) * 100:+.1f}%)")
            timed = [m["measured_step_ms"] for m in r.extra["measured_vs_predicted"] if m.get("in_force")]
            if len(timed) == 1 and r.step_ms:  # one compiled graph: its span against the whole step
                line += (f"; this row's step {r.step_ms:.1f} ms against {timed[0]:.1f} ms the backend timed of "
                         f"its plan in force (the compiled graph's span, from its call to the backward's end)")
            lines.append(line)
    if rows and all(r.activation_gib is None for r in rows if r.status == "ok"):
        lines.append("act GiB: memory is measured on CUDA only")
    return "\n".join(lines)


def _label(row) -> str:
    zoo = row.extra.get("zoo_strategy")
    return f"{zoo}={row.strategy.split(':', 1)[1]}" if zoo in DERIVED else row.strategy


def _replanned(m: dict) -> str:
    if m["replaces"] is None:
        return ""
    return " (re-planned; given up, the plan it replaced runs)" if m.get("reverted") else " (re-planned)"


def _f(x, digits: int) -> str:
    return "" if x is None else f"{x:.{digits}f}"


def say(line: str) -> None:
    print(line, flush=True)


def list_models() -> str:
    lines = []
    for m in MODELS.values():
        needs = f"; needs {m.needs}" if m.needs else ""
        lines.append(f"{m.name}: {m.about}{needs}")
        lines.append(f"    strategies: {','.join(m.default_strategies())}")
        if m.no_sac:
            lines.append(f"    no sac: {m.no_sac}")
    return "\n".join(lines)


def _positive(kind: type, *, zero: bool = False):
    def parse(text: str):
        value = kind(text)
        if value < 0 or (value == 0 and not zero):
            raise argparse.ArgumentTypeError(f"{text} must be {'>= 0' if zero else '> 0'}")
        return value
    return parse


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, dict[str, list[str]]]:
    p = argparse.ArgumentParser(prog="python benchmarks/zoo.py",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--list", action="store_true", help="print the models and their default strategies")
    p.add_argument("--models", default=None, help=f"comma-separated, of: {', '.join(MODELS)}")
    p.add_argument("--out", default=None, help="folder: OUT/<model>/compare.* and OUT/zoo.json")
    p.add_argument("--strategies", default=None,
                   help=f"comma-separated, for every model (default: each model's own): {STRATEGY_HELP}")
    p.add_argument("--steps", type=_positive(int), default=5, help="measured steps per row")
    p.add_argument("--warmup", type=_positive(int, zero=True), default=2, help="steps before measuring")
    p.add_argument("--timeout", type=_positive(float), default=1800, help="seconds per row")
    p.add_argument("--device", default="cuda")
    p.add_argument("--budget-seconds", type=_positive(float, zero=True), default=None,
                   help="start no row once this many seconds have passed (a row started "
                        "may still run up to --timeout)")
    p.add_argument("--dump", action="store_true",
                   help="offload rows dump graphs, plans and measurements (measured.json, "
                        "timeline.json) under OUT/<model>/dump/<strategy>/; writing them adds "
                        "to the first step's time")
    p.add_argument("--offload-options", default=None, metavar="JSON",
                   help='extra backend options of every offload row, a JSON object, e.g. '
                        '\'{"max_host_bytes": 0}\' (not memory_budget nor devices: the strategy sets them)')
    # compare's CACHES, written out: --list imports no torch
    p.add_argument("--caches", default="cold", choices=("cold", "warm"),
                   help="cold: each row compiles with empty Inductor caches and an empty plan cache "
                        "(the first-step column is a first compile); warm: the caches as they are")
    args = p.parse_args(argv)
    if args.list:
        return args, {}
    if not args.models:
        p.error(f"--models is required (of: {', '.join(MODELS)}); --list describes them")
    if not args.out:
        p.error("--out is required")
    if args.offload_options is not None:
        from offload_compiler.compare.cli import _offload_options
        try:
            args.offload_options = _offload_options(args.offload_options)
        except ValueError as e:
            p.error(f"--offload-options: {e}")
    names = [m for m in args.models.split(",") if m]
    unknown = [m for m in names if m not in MODELS]
    if unknown or not names:
        p.error(f"unknown model(s) {unknown}; valid models: {', '.join(MODELS)}")
    plan = {}
    for name in dict.fromkeys(names):
        strategies = (args.strategies.split(",") if args.strategies
                      else MODELS[name].default_strategies())
        try:
            for s in strategies:
                check_strategy(s)
            check_order(strategies)
        except ValueError as e:
            p.error(str(e))
        plan[name] = strategies
    return args, plan


def main(argv: list[str] | None = None) -> int:
    args, plan = parse_args(argv)
    if args.list:
        print(list_models())
        return 0
    settings = Settings(device=args.device, steps=args.steps, warmup=args.warmup,
                        timeout_s=args.timeout, out=Path(args.out), budget_s=args.budget_seconds,
                        dump=args.dump, caches=args.caches, offload_options=args.offload_options)
    settings.out.mkdir(parents=True, exist_ok=True)
    results = run_zoo(plan, settings)
    for name, rows in results.items():
        say("\n" + model_table(MODELS[name], rows))
    not_run = [f"{name}: {r.strategy} ({r.note})" for name, rows in results.items() for r in rows
               if r.status == NOT_RUN]
    if not_run:
        say(f"\nzoo: not run: {'; '.join(not_run)}")
    say(f"zoo: wrote {settings.out / 'zoo.json'}")
    return 0 if any(r.status == "ok" for rows in results.values() for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
