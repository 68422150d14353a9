"""A small GPT (decoder-only transformer), readable top to bottom.

Pre-norm blocks of causal self-attention (``scaled_dot_product_attention``) and a GELU
MLP, learned position embeddings, tied output head. Sizes come from :class:`GPTConfig`;
:data:`PRESETS` names a CPU-sized and an H100-sized configuration.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int = 512
    """Number of token ids."""
    seq_len: int = 64
    """Longest sequence (size of the position table)."""
    n_layers: int = 2
    """Transformer blocks."""
    d_model: int = 64
    """Width of the residual stream."""
    n_heads: int = 4
    """Attention heads; must divide ``d_model``."""
    dropout: float = 0.0
    """Dropout after attention and MLP (and on embeddings)."""
    batch_size: int = 4
    """Sequences per step (used by the example scripts)."""

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise ValueError(f"n_heads={self.n_heads} must divide d_model={self.d_model}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout={self.dropout} must be in [0, 1)")


PRESETS = {
    # Runs in seconds on a laptop CPU.
    "tiny": GPTConfig(vocab_size=512, seq_len=64, n_layers=2, d_model=64, n_heads=4, batch_size=4),
    # Copies take milliseconds; fits an H100 with room to spare.
    "medium": GPTConfig(vocab_size=8192, seq_len=2048, n_layers=8, d_model=1024, n_heads=16, batch_size=4),
    # The reference size of docs/design.md: 8 layers, width 2048, sequence 4096, batch 4.
    "h100": GPTConfig(vocab_size=32768, seq_len=4096, n_layers=8, d_model=2048, n_heads=16, batch_size=4),
}


def preset(name: str, **overrides) -> GPTConfig:
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; valid presets are {sorted(PRESETS)}")
    return replace(PRESETS[name], **overrides)


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.dropout = cfg.dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.n_heads, d // self.n_heads).transpose(1, 2) for z in (q, k, v))
        drop = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=drop)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.up = nn.Linear(cfg.d_model, 4 * cfg.d_model)
        self.down = nn.Linear(4 * cfg.d_model, cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = MLP(cfg)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop(self.attn(self.ln1(x)))
        return x + self.drop(self.mlp(self.ln2(x)))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos = nn.Embedding(cfg.seq_len, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.head.weight = self.tok.weight  # tied
        self.apply(self._init)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        """Logits for ``idx`` (batch, seq), or the mean cross-entropy if ``targets`` given."""
        t = idx.shape[1]
        pos = torch.arange(t, device=idx.device)
        x = self.drop(self.tok(idx) + self.pos(pos))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        if targets is None:
            return logits
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def make_batch(cfg: GPTConfig, device: str | torch.device = "cpu", *, seed: int = 0,
               seq_len: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Random token ids and next-token targets, ``(batch, seq)`` each."""
    g = torch.Generator().manual_seed(seed)
    t = seq_len or cfg.seq_len
    data = torch.randint(cfg.vocab_size, (cfg.batch_size, t + 1), generator=g)
    return data[:, :-1].to(device), data[:, 1:].to(device)
