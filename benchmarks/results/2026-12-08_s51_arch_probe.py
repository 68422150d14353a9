"""Session 51 probe (issue 18), CPU: the architectures of `tests/test_more_architectures.py` at sizes a GPU
trains, for `explain` (planned for an H100 on fake tensors):

    python -m offload_compiler explain benchmarks/results/2026-12-08_s51_arch_probe.py:mobilenet --budget 0.1

`unet` (16 of 3x256x256, width 32), `mobilenet` (MobileNetV2-style inverted residuals, 128 of 3x112x112),
`mobilenet_small` (16 of 3x64x64), `encoder` (`nn.TransformerEncoder`, 6 pre-norm layers of width 1024, 8 of
1024 tokens)."""
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from test_more_architectures import MobileNet, UNet  # noqa: E402


class BigEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        layer = nn.TransformerEncoderLayer(1024, 8, 4096, dropout=0.0, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, 6, enable_nested_tensor=False)
        self.embed, self.head = nn.Embedding(8000, 1024), nn.Linear(1024, 8000)

    def forward(self, idx, targets):
        mask = nn.Transformer.generate_square_subsequent_mask(idx.shape[1])
        h = self.encoder(self.embed(idx), mask=mask, is_causal=True)
        return F.cross_entropy(self.head(h).flatten(0, 1), targets.flatten())


def unet():
    return UNet(32), (torch.randn(16, 3, 256, 256), torch.randn(16, 1, 256, 256))


def mobilenet():
    return MobileNet(), (torch.randn(128, 3, 112, 112), torch.randint(10, (128,)))


def mobilenet_small():
    return MobileNet(), (torch.randn(16, 3, 64, 64), torch.randint(10, (16,)))


def encoder():
    return BigEncoder(), (torch.randint(8000, (8, 1024)), torch.randint(8000, (8, 1024)))
