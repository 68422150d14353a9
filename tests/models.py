"""Small models for the tests: each exercises one kind of saved activation."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class NormGeluMLP(nn.Module):
    """Linear, GELU, LayerNorm, Linear: saves matmul, pointwise and norm results."""

    def __init__(self, d=32):
        super().__init__()
        self.up = nn.Linear(d, 4 * d)
        self.ln = nn.LayerNorm(4 * d)
        self.down = nn.Linear(4 * d, d)

    def forward(self, x):
        return self.down(self.ln(F.gelu(self.up(x)))).pow(2).mean()


class Attention(nn.Module):
    """Causal self-attention through scaled_dot_product_attention."""

    def __init__(self, d=32, heads=4):
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d)
        self.v = nn.Linear(d, d)
        self.o = nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        h = self.heads
        q, k, v = (m(x).view(b, t, h, d // h).transpose(1, 2) for m in (self.q, self.k, self.v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(y.transpose(1, 2).reshape(b, t, d)).square().mean()


class Transposed(nn.Module):
    """Saves non-contiguous activations: a dense permuted one and a strided slice."""

    def __init__(self, d=32):
        super().__init__()
        self.w = nn.Parameter(torch.randn(d, d) / d**0.5)

    def forward(self, x):
        y = x @ self.w                      # (n, d)
        a = torch.tanh(y.t())               # saved with transposed strides (dense)
        s = y[:, ::2]                       # a view with gaps (not dense)
        b = s * s.sin()                     # saves the strided view
        return (a @ x).sum() + b.sum()


class Embed(nn.Module):
    """Integer inputs (token ids) into an embedding, then a small MLP."""

    def __init__(self, vocab=50, d=32):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.fc = nn.Linear(d, d)

    def forward(self, idx):
        return torch.sigmoid(self.fc(self.emb(idx))).sum()


class Dropout(nn.Module):
    def __init__(self, d=32, p=0.3):
        super().__init__()
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)
        self.p = p

    def forward(self, x):
        h = F.dropout(F.relu(self.fc1(x)), self.p, self.training)
        return self.fc2(h).square().mean()


class ConvNet(nn.Module):
    """Two convolutions on an NCHW input, a norm and ReLUs between: Inductor lays the
    activations out channels-last, where the graph (eager) has them contiguous."""

    def __init__(self, channels: int = 8, size: int = 16):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, channels, 3, padding=1), nn.BatchNorm2d(channels), nn.ReLU(),
                                  nn.Conv2d(channels, channels, 3, padding=1), nn.ReLU(), nn.Flatten())
        self.head = nn.Linear(channels * size * size, 10)

    def forward(self, x):
        return self.head(self.body(x))


class SlicedConv(nn.Module):
    """Every other channel of a convolution's output (a slice with gaps, saved packed),
    read by pointwise ops and a second convolution."""

    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x):
        s = self.c1(x)[:, ::2]
        return self.c2(torch.sin(s) * s)


class Bottlenecks(nn.Module):
    """Residual blocks of 1x1, 3x3 and 1x1 convolutions with batch norms, as ResNet's:
    many small buffers of a few sizes (the norms' statistics), which Inductor's buffer
    pool hands from one block to the next."""

    def __init__(self, channels: int = 32, blocks: int = 4, size: int = 16):
        super().__init__()
        self.stem = nn.Conv2d(3, channels, 3, padding=1)
        self.blocks = nn.ModuleList(nn.Sequential(
            nn.Conv2d(channels, channels, 1), nn.BatchNorm2d(channels), nn.ReLU(),
            nn.Conv2d(channels, channels, 3, padding=1), nn.BatchNorm2d(channels), nn.ReLU(),
            nn.Conv2d(channels, channels, 1), nn.BatchNorm2d(channels)) for _ in range(blocks))
        self.head = nn.Linear(channels * size * size, 10)

    def forward(self, x):
        x = self.stem(x)
        for block in self.blocks:
            x = torch.relu(block(x) + x)
        return self.head(x.flatten(1))
