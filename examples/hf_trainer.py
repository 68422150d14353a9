"""Train a Hugging Face model with ``Trainer`` and the offload backend.

    pip install -e ".[hf]"
    python examples/hf_trainer.py                  # tiny random Llama, CPU loopback, < 1 minute
    python examples/hf_trainer.py --device cuda --layers 8 --hidden 2048 --seq 2048

Trainer cannot select this backend (``torch_compile_backend`` goes through accelerate's
``DynamoBackend`` enum, which has no ``offload``, and it cannot pass options): compile the
model in place first with ``offload_compiler.compile_for_training`` and hand it to Trainer
with ``torch_compile`` left off. The model is a ``LlamaForCausalLM`` built from a config in
code with random weights (nothing is downloaded), trained on random tokens.
"""

from __future__ import annotations

import argparse
import logging

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

import offload_compiler


class RandomTokens(torch.utils.data.Dataset):
    """``count`` sequences of random token ids, each its own labels."""

    def __init__(self, count: int, seq: int, vocab: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(vocab, (count, seq), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cpu", "cuda"])
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--memory-budget", default="0.5", help='"auto" or a fraction in (0, 1]')
    p.add_argument("--no-offload", action="store_true", help="train without the offload backend")
    p.add_argument("--out", default="out/hf_trainer", help="Trainer's output_dir (nothing is saved)")
    return p.parse_args(argv)


def llama(args: argparse.Namespace) -> LlamaForCausalLM:
    config = LlamaConfig(vocab_size=512, hidden_size=args.hidden, intermediate_size=args.hidden * 11 // 4,
                         num_hidden_layers=args.layers, num_attention_heads=max(4, args.hidden // 128),
                         num_key_value_heads=max(4, args.hidden // 128), max_position_embeddings=args.seq)
    torch.manual_seed(0)
    return LlamaForCausalLM(config)


def offload_options(args: argparse.Namespace) -> dict:
    budget = args.memory_budget if args.memory_budget == "auto" else float(args.memory_budget)
    if args.device == "cpu":  # loopback: the same rewrite on a CPU; eager keeps the first step short
        return {"memory_budget": budget, "devices": ("cpu",), "min_offload_bytes": 0, "inner_compiler": "eager"}
    return {"memory_budget": budget}


def main(argv: list[str] | None = None) -> list[float]:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    model = llama(args)
    if not args.no_offload:
        offload_compiler.compile_for_training(model, **offload_options(args))
    training = TrainingArguments(
        output_dir=args.out, max_steps=args.steps, per_device_train_batch_size=args.batch,
        learning_rate=1e-3, logging_steps=1, save_strategy="no", report_to=[], seed=0,
        use_cpu=args.device == "cpu", bf16=args.device == "cuda", torch_compile=False)
    trainer = Trainer(model=model, args=training,
                      train_dataset=RandomTokens(args.steps * args.batch, args.seq, model.config.vocab_size))
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    if not args.no_offload:
        for plan in offload_compiler.backend_of(model).plans:
            print(plan.summary())
    print("losses:", ", ".join(f"{x:.4f}" for x in losses))
    return losses


if __name__ == "__main__":
    main()
