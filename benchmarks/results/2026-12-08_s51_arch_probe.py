"""Session 51 probe (issue 18), CPU: the architectures of `tests/test_more_architectures.py` at sizes a GPU
trains, for `explain` (planned for an H100 on fake tensors):

    python -m offload_compiler explain benchmarks/results/2026-12-08_s51_arch_probe.py:mobilenet --budget 0.1

`unet` (16 of 3x256x256, width 32), `mobilenet` (MobileNetV2-style inverted residuals, 128 of 3x112x112),
`mobilenet_small` (16 of 3x64x64), `encoder` (`nn.TransformerEncoder`, 6 pre-norm layers of width 1024, 8 of
1024 tokens)."""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from test_more_architectures import Encoder, MobileNet, UNet  # noqa: E402


def unet():
    return UNet(32), (torch.randn(16, 3, 256, 256), torch.randn(16, 1, 256, 256))


def mobilenet():
    return MobileNet(), (torch.randn(128, 3, 112, 112), torch.randint(10, (128,)))


def mobilenet_small():
    return MobileNet(), (torch.randn(16, 3, 64, 64), torch.randint(10, (16,)))


def encoder():
    return Encoder(1024, 8, 4096, 6, 8000), (torch.randint(8000, (8, 1024)), torch.randint(8000, (8, 1024)))
