"""Gradient parity on Hugging Face architectures nobody here wrote (tiny random configs,
CPU loopback): an encoder-decoder with relative position bias and dropout (T5), routed
experts (Mixtral), ALiBi with dropout (Bloom), rotary embeddings with a parallel residual
and dropout (GPT-NeoX), an image model Dynamo splits in two graphs (ViT, dropout), an
encoder given a padding mask and token types (BERT, dropout), shifted-window attention
(Swin), and a selective scan whose saved slices Inductor lays out otherwise than the graph
(Mamba: the copy of one such slice refused it, session 46), and GPT-2 under its own
activation checkpointing with dropout (its saved generator states paired one place off
with backward's inputs crashed backward, session 47).
The rewrite offloads and recomputes on each; with the eager inner compiler the losses and
gradients over two SGD steps are bitwise those of the same compile with nothing moved,
dropout included (its randomness replayed where recomputed); with Inductor, within
Inductor's own tolerance."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

import offload_compiler
from helpers import assert_bitwise, assert_close

transformers = pytest.importorskip("transformers")

VOCAB = 128
#: The loopback rewrite on every saved activation, however small, planned once (no
#: measurement on a CPU), with the plan cache off so each case plans.
OPTIONS = {"devices": ("cpu",), "min_offload_bytes": 0, "replan": False, "plan_cache": False}


def _t5():
    cfg = transformers.T5Config(vocab_size=VOCAB, d_model=64, d_ff=128, d_kv=16, num_layers=2, num_heads=4,
                                dropout_rate=0.1, decoder_start_token_id=0, pad_token_id=0)
    return transformers.T5ForConditionalGeneration(cfg)


def _mixtral():
    cfg = transformers.MixtralConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                                     num_experts_per_tok=2)
    return transformers.MixtralForCausalLM(cfg)


def _bloom():
    cfg = transformers.BloomConfig(vocab_size=VOCAB, hidden_size=64, n_layer=2, n_head=4, hidden_dropout=0.1,
                                   attention_dropout=0.1)
    return transformers.BloomForCausalLM(cfg)


def _gpt_neox():
    cfg = transformers.GPTNeoXConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                     num_attention_heads=4, hidden_dropout=0.1, attention_dropout=0.1)
    return transformers.GPTNeoXForCausalLM(cfg)


def _vit():
    cfg = transformers.ViTConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                 image_size=32, patch_size=8, num_labels=10, hidden_dropout_prob=0.1)
    return transformers.ViTForImageClassification(cfg)


def _bert():
    cfg = transformers.BertConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=128, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
    return transformers.BertForMaskedLM(cfg)


def _swin():
    cfg = transformers.SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2],
                                  window_size=4, num_labels=10)
    return transformers.SwinForImageClassification(cfg)


def _mamba():
    cfg = transformers.MambaConfig(vocab_size=VOCAB, hidden_size=64, state_size=8, num_hidden_layers=2, expand=2,
                                   conv_kernel=4)
    return transformers.MambaForCausalLM(cfg)


def _gpt2_checkpointed():
    cfg = transformers.GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, n_positions=64)
    model = transformers.GPT2LMHeadModel(cfg)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model


MODELS = {"t5": _t5, "mixtral": _mixtral, "bloom": _bloom, "gpt_neox": _gpt_neox, "vit": _vit, "bert": _bert,
          "swin": _swin, "mamba": _mamba, "gpt2_checkpointed": _gpt2_checkpointed}


def _inputs(name: str, step: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(100 + step)
    if name in ("vit", "swin"):
        return {"pixel_values": torch.randn(2, 3, 32, 32, generator=g), "labels": torch.randint(10, (2,), generator=g)}
    ids = torch.randint(VOCAB, (2, 16), generator=g)
    if name == "bert":  # the second sequence padded after 11 tokens; two segments
        mask = torch.ones(2, 16, dtype=torch.long)
        mask[1, 11:] = 0
        return {"input_ids": ids, "attention_mask": mask, "token_type_ids": (torch.arange(16) > 8).long().expand(2, 16),
                "labels": ids}
    if name == "t5":
        return {"input_ids": ids, "labels": torch.randint(VOCAB, (2, 8), generator=g)}
    return {"input_ids": ids, "labels": ids}


_models: dict[str, torch.nn.Module] = {}


def _model(name: str) -> torch.nn.Module:
    """One initialisation per architecture, copied for each run."""
    if name not in _models:
        torch.manual_seed(0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _models[name] = MODELS[name]()
    return copy.deepcopy(_models[name]).train()


def _train(name: str, **options):
    """Two SGD steps of ``name`` compiled with the backend: (losses, gradients, plans)."""
    torch._dynamo.reset()
    model = _model(name)
    backend = offload_compiler.make_backend(**OPTIONS, **options)
    compiled = torch.compile(model, backend=backend)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    losses, grads = [], []
    for step in range(2):
        torch.manual_seed(7 + step)  # dropout's randomness, the same in every run
        loss = compiled(**_inputs(name, step)).loss
        loss.backward()
        losses.append(loss.detach().clone())
        grads.append([p.grad.detach().clone() for p in model.parameters() if p.grad is not None])
        opt.step()
        opt.zero_grad(set_to_none=True)
    return losses, grads, backend.plans


_references: dict[tuple[str, str], tuple] = {}


def _reference(name: str, inner: str):
    if (name, inner) not in _references:
        _references[name, inner] = _train(name, policy="none", inner_compiler=inner)
    return _references[name, inner]


@pytest.mark.parametrize("budget", ["auto", 0.1])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_gradients_bitwise_with_the_eager_inner_compiler(name, budget):
    ref_losses, ref_grads, _ = _reference(name, "eager")
    losses, grads, plans = _train(name, inner_compiler="eager", memory_budget=budget)
    assert sum(len(p.offloaded) for p in plans) > 0, "nothing was offloaded"
    if budget == 0.1:
        assert sum(len(p.recomputed) for p in plans) > 0, "nothing was recomputed"
    assert len(grads[0]) == len(ref_grads[0])
    assert_bitwise((losses, grads), (ref_losses, ref_grads))


@pytest.mark.parametrize("name", ["mixtral", "mamba"])
def test_gradients_within_inductors_tolerance(name):
    ref_losses, ref_grads, _ = _reference(name, "inductor")
    losses, grads, plans = _train(name, inner_compiler="inductor", memory_budget=0.1)
    assert sum(len(p.offloaded) for p in plans) > 0 and sum(len(p.recomputed) for p in plans) > 0
    assert_close((losses, grads), (ref_losses, ref_grads))
