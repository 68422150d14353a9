"""Session 48 probe (issue 18), CPU: gradient parity on vision architectures written in the
style of torchvision and timm (torchvision does not load on this machine), run as the session
45 probe runs Hugging Face models: two SGD steps, with the eager inner compiler at ``"auto"``
and 0.1 bitwise against the same compile with ``policy="none"``, with Inductor at 0.1 within
``torch.testing.assert_close``'s default tolerance.

    python benchmarks/results/2026-12-07_s48_vision_probe.py MODEL eager|inductor

MODEL: ``unet`` (max-pool, transposed convolutions, skip connections concatenated, group norm,
SiLU), ``mobilenet`` (depthwise convolutions, in-place ReLU6, squeeze-and-excitation gates,
hard-swish, inverted residuals), ``densenet`` (each layer's input the concatenation of all
before it), ``resnet_amp`` (bottlenecks with in-place ReLU and ``+=``, channels-last input,
bfloat16 autocast) and ``frozen_bn`` (a backbone whose batch norms run in eval mode and whose
first stage is frozen, a trainable head).
"""
import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import nn

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("s45_probe", HERE / "2026-11-29_s45_hf_probe.py")
s45 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(s45)


class Classifier(nn.Module):
    """``body`` then a linear head; returns the cross-entropy loss as ``.loss``."""

    def __init__(self, body: nn.Module, features: int, amp: bool = False):
        super().__init__()
        self.body, self.head, self.amp = body, nn.Linear(features, 10), amp

    def forward(self, pixel_values, labels):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.amp):
            logits = self.head(self.body(pixel_values).mean((2, 3)))
        return SimpleNamespace(loss=F.cross_entropy(logits.float(), labels))


class UNet(nn.Module):
    def __init__(self, c=8):
        super().__init__()
        def block(i, o):
            return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.GroupNorm(4, o), nn.SiLU(),
                                 nn.Conv2d(o, o, 3, padding=1), nn.GroupNorm(4, o), nn.SiLU())
        self.down1, self.down2, self.mid = block(3, c), block(c, 2 * c), block(2 * c, 4 * c)
        self.up2, self.dec2 = nn.ConvTranspose2d(4 * c, 2 * c, 2, stride=2), block(4 * c, 2 * c)
        self.up1, self.dec1 = nn.ConvTranspose2d(2 * c, c, 2, stride=2), block(2 * c, c)

    def forward(self, x):
        d1 = self.down1(x)
        d2 = self.down2(F.max_pool2d(d1, 2))
        m = self.mid(F.max_pool2d(d2, 2))
        u2 = self.dec2(torch.cat([self.up2(m), d2], 1))
        return self.dec1(torch.cat([self.up1(u2), d1], 1))


class InvertedResidual(nn.Module):
    def __init__(self, c, expand=4):
        super().__init__()
        h = c * expand
        self.expand = nn.Sequential(nn.Conv2d(c, h, 1, bias=False), nn.BatchNorm2d(h), nn.ReLU6(inplace=True))
        self.depthwise = nn.Sequential(nn.Conv2d(h, h, 3, padding=1, groups=h, bias=False), nn.BatchNorm2d(h),
                                       nn.Hardswish())
        self.se_reduce, self.se_expand = nn.Conv2d(h, h // 4, 1), nn.Conv2d(h // 4, h, 1)
        self.project = nn.Sequential(nn.Conv2d(h, c, 1, bias=False), nn.BatchNorm2d(c))

    def forward(self, x):
        y = self.depthwise(self.expand(x))
        gate = torch.sigmoid(self.se_expand(F.relu(self.se_reduce(y.mean((2, 3), keepdim=True)))))
        return x + self.project(y * gate)


class DenseBlock(nn.Module):
    def __init__(self, c, growth=8, layers=4):
        super().__init__()
        self.layers = nn.ModuleList(nn.Sequential(nn.BatchNorm2d(c + i * growth), nn.ReLU(inplace=True),
                                                  nn.Conv2d(c + i * growth, growth, 3, padding=1, bias=False))
                                    for i in range(layers))

    def forward(self, x):
        feats = [x]
        for layer in self.layers:
            feats.append(layer(torch.cat(feats, 1)))
        return torch.cat(feats, 1)


class Bottleneck(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c, c // 2, 1, bias=False), nn.BatchNorm2d(c // 2)
        self.conv2, self.bn2 = nn.Conv2d(c // 2, c // 2, 3, padding=1, bias=False), nn.BatchNorm2d(c // 2)
        self.conv3, self.bn3 = nn.Conv2d(c // 2, c, 1, bias=False), nn.BatchNorm2d(c)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        out += x
        return self.relu(out)


def _stem(c):
    return nn.Sequential(nn.Conv2d(3, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU(inplace=True))


class FrozenBN(nn.Module):
    """A backbone whose batch norms stay in eval mode through ``train()``, its stem frozen."""

    def __init__(self, c=16):
        super().__init__()
        self.stem, self.stage = _stem(c), nn.Sequential(Bottleneck(c), Bottleneck(c))
        for p in self.stem.parameters():
            p.requires_grad_(False)

    def train(self, mode=True):
        super().train(mode)
        for m in self.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.eval()
        return self

    def forward(self, x):
        return self.stage(self.stem(x))


MODELS = {
    "unet": lambda: Classifier(UNet(), 8),
    "mobilenet": lambda: Classifier(nn.Sequential(_stem(16), InvertedResidual(16), InvertedResidual(16)), 16),
    "densenet": lambda: Classifier(nn.Sequential(_stem(16), DenseBlock(16)), 48),
    "resnet_amp": lambda: Classifier(nn.Sequential(_stem(32), Bottleneck(32), Bottleneck(32), Bottleneck(32)),
                                     32, amp=True),
    "frozen_bn": lambda: Classifier(FrozenBN(), 16),
}


def inputs(name, step):
    g = torch.Generator().manual_seed(100 + step)
    x = torch.randn(2, 3, 32, 32, generator=g)
    if name == "resnet_amp":
        x = x.contiguous(memory_format=torch.channels_last)
    return {"pixel_values": x, "labels": torch.randint(10, (2,), generator=g)}


if __name__ == "__main__":
    s45.probe(MODELS, inputs, sys.argv[1], sys.argv[2])
