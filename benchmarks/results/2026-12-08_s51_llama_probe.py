"""A Hugging Face Llama layout written here (transformers is not installed on this CPU machine), for
`explain`: `benchmarks/zoo_models.py:llama`'s sizes (8 layers, width 2048, 16 heads, MLP 5632, vocabulary
32000, batch 4 of 4096 tokens, bf16): RMSNorm computed in float32, rotary embeddings, SDPA (causal),
SwiGLU MLP, untied head, cross-entropy on the shifted logits in float32."""
import torch
import torch.nn.functional as F
from torch import nn

WIDTH, HEADS, MLP, VOCAB, LAYERS, BATCH, SEQ = 2048, 16, 5632, 32000, 8, 4, 4096


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(dim)), eps

    def forward(self, x):
        dtype = x.dtype
        x = x.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.q_proj, self.k_proj = nn.Linear(WIDTH, WIDTH, bias=False), nn.Linear(WIDTH, WIDTH, bias=False)
        self.v_proj, self.o_proj = nn.Linear(WIDTH, WIDTH, bias=False), nn.Linear(WIDTH, WIDTH, bias=False)

    def forward(self, x, cos, sin):
        b, n, c = x.shape
        q, k, v = (p(x).view(b, n, HEADS, c // HEADS).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(y.transpose(1, 2).reshape(b, n, c))


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.input_layernorm, self.post_attention_layernorm = RMSNorm(WIDTH), RMSNorm(WIDTH)
        self.self_attn = Attention()
        self.gate_proj, self.up_proj = nn.Linear(WIDTH, MLP, bias=False), nn.Linear(WIDTH, MLP, bias=False)
        self.down_proj = nn.Linear(MLP, WIDTH, bias=False)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Llama(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed_tokens = nn.Embedding(VOCAB, WIDTH)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.norm, self.lm_head = RMSNorm(WIDTH), nn.Linear(WIDTH, VOCAB, bias=False)
        inv = 1.0 / (10000 ** (torch.arange(0, WIDTH // HEADS, 2).float() / (WIDTH // HEADS)))
        self.register_buffer("inv_freq", inv, persistent=False)

    def forward(self, ids):
        x = self.embed_tokens(ids)
        freqs = torch.arange(ids.shape[1], device=ids.device).float()[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin)
        logits = self.lm_head(self.norm(x)).float()
        return F.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), ids[:, 1:].reshape(-1))


def make():
    torch.manual_seed(0)
    return Llama().to(torch.bfloat16).train(), (torch.randint(VOCAB, (BATCH, SEQ)),)
