"""The zoo's models: factories the comparison harness calls, one per model.

Each factory takes no argument and returns ``(model, batch)``: a module whose
``forward(*batch)`` returns the scalar training loss, randomly initialised (nothing is
downloaded) from a fixed seed, so every strategy's process builds the same weights and
batch. The harness moves the model to the device and dtype of the run and the batch to
the device. ``transformers``, ``timm`` and ``torchvision`` are imported inside the
factory that needs them: this module imports on a machine that has none of them.

``benchmarks/zoo.py`` names each factory with the dtype it runs in and the dotted path
of its repeated blocks (what ``sac`` and ``full_ac`` checkpoint).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

SEED = 0


def _batch_generator() -> torch.Generator:
    return torch.Generator().manual_seed(SEED)


class CausalLMLoss(nn.Module):
    """A Hugging Face causal language model whose forward returns its own loss: the
    next-token cross-entropy of ``ids`` (``labels=ids``; the model shifts them)."""

    def __init__(self, lm: nn.Module) -> None:
        super().__init__()
        self.lm = lm

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.lm(input_ids=ids, labels=ids).loss


class AutocastClassifierLoss(nn.Module):
    """An image classifier's cross-entropy, computed under bf16 autocast on the input's
    device (fp32 weights, bf16 matmuls and convolutions). ``channels_last`` puts the
    images in that memory format first (a no-op when they already are)."""

    def __init__(self, model: nn.Module, *, channels_last: bool = False) -> None:
        super().__init__()
        self.model = model
        self.channels_last = channels_last

    def forward(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        if self.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        with torch.autocast(images.device.type, torch.bfloat16):
            logits = self.model(images)
        return F.cross_entropy(logits.float(), labels)


class ResNetLoss(AutocastClassifierLoss):
    """ResNet's loss, with its bottleneck blocks listed as ``bottlenecks``: a tuple (not a
    registered submodule, so parameters and the state dict are unchanged) of every block of
    ``layer1`` to ``layer4``, in order, for checkpointing to wrap one by one."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__(model, channels_last=True)
        blocks = tuple(b for name in ("layer1", "layer2", "layer3", "layer4")
                       for b in getattr(model, name))
        self.bottlenecks = blocks


def _images(batch_size: int, classes: int = 1000) -> tuple[torch.Tensor, torch.Tensor]:
    g = _batch_generator()
    images = torch.randn(batch_size, 3, 224, 224, generator=g)
    labels = torch.randint(classes, (batch_size,), generator=g)
    return images, labels


def llama() -> tuple[nn.Module, tuple[torch.Tensor]]:
    """Llama (Hugging Face ``LlamaForCausalLM``): 8 layers, width 2048, 16 heads, MLP
    5632, vocabulary 32000, SDPA attention; batch 4 of 4096 token ids. Run in bf16."""
    return _llama(layers=8, batch=4)


def llama_4l() -> tuple[nn.Module, tuple[torch.Tensor]]:
    """The Llama above with 4 layers and a batch of 2 (per rank): issue 21's two-GPU setup."""
    return _llama(layers=4, batch=2)


def _llama(layers: int, batch: int) -> tuple[nn.Module, tuple[torch.Tensor]]:
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(num_hidden_layers=layers, hidden_size=2048, num_attention_heads=16,
                      intermediate_size=5632, vocab_size=32000, max_position_embeddings=4096,
                      use_cache=False, attn_implementation="sdpa")
    torch.manual_seed(SEED)
    model = CausalLMLoss(LlamaForCausalLM(cfg)).train()
    ids = torch.randint(cfg.vocab_size, (batch, 4096), generator=_batch_generator())
    return model, (ids,)


def vit() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    """ViT-B/16 (timm ``vit_base_patch16_224``), batch 96 of 3x224x224 images, 1000
    classes, under bf16 autocast. Run in float32 (the weights)."""
    import timm

    torch.manual_seed(SEED)
    model = AutocastClassifierLoss(timm.create_model("vit_base_patch16_224", pretrained=False)).train()
    return model, _images(96)


def resnet50() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    """ResNet-50 (torchvision), batch 128 of 3x224x224 images in ``channels_last``, 1000
    classes, under bf16 autocast. Run in float32 (the weights)."""
    import torchvision

    torch.manual_seed(SEED)
    model = ResNetLoss(torchvision.models.resnet50(weights=None)).train()
    model = model.to(memory_format=torch.channels_last)
    images, labels = _images(128)
    return model, (images.contiguous(memory_format=torch.channels_last), labels)


def _gpt(name: str):
    from offload_compiler.models.gpt import GPT, make_batch, preset

    cfg = preset(name)
    torch.manual_seed(SEED)
    return GPT(cfg).train(), make_batch(cfg, seed=SEED)


def gpt() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    """The project's example GPT, ``h100`` preset (8 layers, width 2048, sequence 4096,
    batch 4, vocabulary 32768). Run in bf16."""
    return _gpt("h100")


def tiny_gpt() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    """The example GPT's ``tiny`` preset: a CPU smoke test in seconds."""
    return _gpt("tiny")
