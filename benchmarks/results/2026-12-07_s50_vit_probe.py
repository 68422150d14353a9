"""A timm-layout ViT-B/16 (written here; timm is not installed on this CPU machine), for `explain`:
patch embedding, class token, position embedding, 12 pre-norm blocks (qkv with bias, SDPA, GELU MLP),
final norm, head; batch 96 under bf16 autocast, as `benchmarks/zoo_models.py:vit`."""
import sys
import torch
import torch.nn.functional as F
from torch import nn
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2]))
from benchmarks.zoo_models import AutocastClassifierLoss, _images


class Block(nn.Module):
    def __init__(self, dim=768, heads=12):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim, eps=1e-6), nn.LayerNorm(dim, eps=1e-6)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x):
        b, n, c = x.shape
        q, k, v = self.qkv(self.norm1(x)).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        x = x + self.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, c))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class ViT(nn.Module):
    def __init__(self, dim=768, depth=12):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, 16, 16)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.randn(1, 197, dim) * 0.02)
        self.blocks = nn.Sequential(*[Block(dim) for _ in range(depth)])
        self.norm, self.head = nn.LayerNorm(dim, eps=1e-6), nn.Linear(dim, 1000)

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], 1) + self.pos_embed
        return self.head(self.norm(self.blocks(x))[:, 0])


def make():
    torch.manual_seed(0)
    return AutocastClassifierLoss(ViT()).train(), _images(96)
