"""Hugging Face users: ``explain`` with keyword inputs (``input_ids=``, ``labels=``) on an
HF-style model written here, and Trainer and accelerate training a tiny random
``LlamaForCausalLM`` compiled in place, with the same losses and weights as without
offloading (loopback, eager inner compiler: bitwise)."""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import offload_compiler

LOOPBACK = {"devices": ("cpu",), "min_offload_bytes": 0, "inner_compiler": "eager"}


class Block(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(self.norm(x))))


class TinyCausalLM(nn.Module):
    """Takes ``input_ids=`` and ``labels=`` and returns an output with ``.loss``, like a
    Hugging Face causal language model."""

    def __init__(self, vocab: int = 64, d: int = 32, layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList(Block(d) for _ in range(layers))
        self.lm_head = nn.Linear(d, vocab, bias=False)

    def forward(self, input_ids, labels=None, attention_mask=None):
        x = self.embed(input_ids)
        for layer in self.layers:
            x = layer(x)
        logits = self.lm_head(x)
        loss = None if labels is None else F.cross_entropy(logits.flatten(0, 1), labels.flatten())
        return SimpleNamespace(loss=loss, logits=logits)


class TakesAnyKeyword(TinyCausalLM):
    def forward(self, input_ids, labels=None, **kwargs):
        return super().forward(input_ids, labels)


class TakesPolicy(TinyCausalLM):
    def forward(self, input_ids, labels=None, policy=None):
        return super().forward(input_ids, labels)


def _ids():
    return torch.randint(64, (2, 16), generator=torch.Generator().manual_seed(0))


def test_explain_takes_keyword_inputs_and_options_apart():
    torch.manual_seed(0)
    ids = _ids()
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # options= is the current way: no warning
        report = offload_compiler.explain(TinyCausalLM(), input_ids=ids, labels=ids,
                                          options={**LOOPBACK, "memory_budget": 0.5})
    assert len(report.graphs) == 1 and report.decisions
    assert {d["decision"] for d in report.decisions} >= {"offload"}
    paths = {d["module_path"] for d in report.decisions}
    assert {"layers.0.up", "layers.1.down", "lm_head"} <= paths
    assert all(d["source_line"].startswith("test_hf.py:") for d in report.decisions if d["source_line"])
    assert "layers.0.up" in str(report)


def test_explain_reads_an_option_keyword_the_model_does_not_take_with_a_future_warning():
    torch.manual_seed(0)
    ids = _ids()
    with pytest.warns(FutureWarning, match=r"options=\{'memory_budget': \.\.\."):
        report = offload_compiler.explain(TinyCausalLM(), ids, labels=ids, memory_budget=0.5,
                                          options=LOOPBACK)
    assert report.graphs[0].predicted["budget_bytes"] > 0  # the budget was taken as an option


@pytest.mark.parametrize("model, message", [
    (TakesAnyKeyword(), r"its forward takes \*\*kwargs"),
    (TakesPolicy(), r"its forward takes a keyword 'policy'"),
])
def test_explain_refuses_a_keyword_that_could_be_an_option_or_an_input(model, message):
    ids = _ids()
    key = "policy" if isinstance(model, TakesPolicy) else "memory_budget"
    with pytest.raises(TypeError, match=message) as info:
        offload_compiler.explain(model, input_ids=ids, **{key: "all" if key == "policy" else 0.5})
    assert f"options={{'{key}': ...}}" in str(info.value)


def test_explain_refuses_an_option_given_twice_and_options_that_are_not_a_dict():
    ids = _ids()
    with pytest.raises(TypeError, match="given both in options= and as a keyword"):
        offload_compiler.explain(TinyCausalLM(), ids, memory_budget=0.5, options={"memory_budget": 0.3})
    with pytest.raises(TypeError, match="give a dict"):
        offload_compiler.explain(TinyCausalLM(), ids, options=[("memory_budget", 0.5)])
    with pytest.raises(ValueError, match="valid options are"):
        offload_compiler.explain(TinyCausalLM(), ids, options={"budget": 0.5})


def test_compile_for_training_checks_options_at_once_and_keeps_the_class():
    model = TinyCausalLM()
    with pytest.raises(ValueError, match="memory_budget"):
        offload_compiler.compile_for_training(model, memory_budget=2.0)
    assert offload_compiler.compile_for_training(model, **LOOPBACK) is model
    assert type(model) is TinyCausalLM and "_orig_mod" not in "".join(model.state_dict())
    ids = _ids()
    model(input_ids=ids, labels=ids).loss.backward()
    assert offload_compiler.backend_of(model).plans[0].offloaded
    with pytest.raises(KeyError, match="not compiled by compile_for_training"):
        offload_compiler.backend_of(TinyCausalLM())


# Trainer and accelerate, on a tiny random LlamaForCausalLM (CI installs transformers).

def _llama():
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=4, max_position_embeddings=32)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config)


class _Tokens(torch.utils.data.Dataset):
    def __init__(self):
        self.ids = torch.randint(128, (8, 16), generator=torch.Generator().manual_seed(0))

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def _train_with_trainer(tmp_path, offload: bool):
    transformers = pytest.importorskip("transformers")
    model = _llama()
    if offload:
        offload_compiler.compile_for_training(model, **LOOPBACK, policy="all")
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / ("offload" if offload else "plain")), max_steps=2,
        per_device_train_batch_size=4, logging_steps=1, save_strategy="no", report_to=[], seed=0,
        use_cpu=True, torch_compile=False)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=_Tokens())
    trainer.train()
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    return losses, [p.detach().clone() for p in model.parameters()], model


def test_trainer_trains_a_model_compiled_in_place_with_the_same_losses(tmp_path):
    plain_losses, plain_weights, _ = _train_with_trainer(tmp_path, offload=False)
    losses, weights, model = _train_with_trainer(tmp_path, offload=True)
    assert len(losses) == 2 and losses == plain_losses
    assert all(torch.equal(a, b) for a, b in zip(weights, plain_weights, strict=True))
    assert offload_compiler.backend_of(model).plans[0].offloaded  # it did offload


def _train_with_accelerate(offload: bool):
    accelerate = pytest.importorskip("accelerate")
    model = _llama()
    if offload:
        offload_compiler.compile_for_training(model, **LOOPBACK, policy="all")
    accelerator = accelerate.Accelerator(cpu=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, optimizer = accelerator.prepare(model, optimizer)
    losses, data = [], _Tokens().ids
    for step in range(2):
        batch = data[4 * step: 4 * step + 4]
        loss = model(input_ids=batch, labels=batch).loss
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.detach().clone())
    return losses, [p.detach().clone() for p in model.parameters()], accelerator.unwrap_model(model)


def test_accelerate_prepares_a_model_compiled_in_place_with_the_same_losses():
    plain_losses, plain_weights, _ = _train_with_accelerate(offload=False)
    losses, weights, model = _train_with_accelerate(offload=True)
    assert all(torch.equal(a, b) for a, b in zip(losses, plain_losses, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(weights, plain_weights, strict=True))
    assert offload_compiler.backend_of(model).plans[0].offloaded


def test_accelerate_cannot_name_the_backend_as_the_readme_says():
    utils = pytest.importorskip("accelerate.utils")
    with pytest.raises(ValueError, match="not a valid DynamoBackend"):
        utils.TorchDynamoPlugin(backend="offload")
