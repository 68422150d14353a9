"""Train a Hugging Face model with ``accelerate`` and the offload backend.

    pip install -e ".[hf]"
    python examples/accelerate_train.py            # tiny random Llama, CPU loopback, < 1 minute
    python examples/accelerate_train.py --device cuda --layers 8 --hidden 2048 --seq 2048

accelerate's ``TorchDynamoPlugin(backend="offload")`` is refused (``'OFFLOAD' is not a
valid DynamoBackend``) and cannot pass options: compile the model in place first with
``offload_compiler.compile_for_training``, then ``Accelerator().prepare(model, optimizer)``
with accelerate's own dynamo backend left at ``"no"``. The model and data are built as in
``examples/hf_trainer.py`` (random weights and tokens, nothing downloaded).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import torch
from accelerate import Accelerator

import offload_compiler

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hf_trainer import RandomTokens, llama, offload_options, parse_args  # noqa: E402


def main(argv: list[str] | None = None) -> list[float]:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    model = llama(args)
    if not args.no_offload:
        offload_compiler.compile_for_training(model, **offload_options(args))
    accelerator = Accelerator(cpu=args.device == "cpu", mixed_precision="bf16" if args.device == "cuda" else "no")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = torch.utils.data.DataLoader(RandomTokens(args.steps * args.batch, args.seq, model.config.vocab_size),
                                       batch_size=args.batch)
    model, optimizer, data = accelerator.prepare(model, optimizer, data)
    losses = []
    for step, batch in enumerate(data):
        loss = model(**batch).loss
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
        print(f"step {step}: loss {losses[-1]:.4f}", flush=True)
    if not args.no_offload:
        for plan in offload_compiler.backend_of(accelerator.unwrap_model(model)).plans:
            print(plan.summary())
    return losses


if __name__ == "__main__":
    main()
