"""`gpt`: a small decoder-only transformer in plain PyTorch, byte-level, with presets by size.

Causal self-attention goes through F.scaled_dot_product_attention(is_causal=True), so right padding
never reaches a real token's logits and no attention mask is needed. No dropout: accumulated and
big-batch runs must compute the same function.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from gaccum_core.presets import GPT_PRESETS, VOCAB, GPTShape


class _Attention(nn.Module):
    def __init__(self, shape: GPTShape) -> None:
        super().__init__()
        self.heads = shape.heads
        self.qkv = nn.Linear(shape.width, 3 * shape.width)
        self.out = nn.Linear(shape.width, shape.width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, t, c = x.shape
        # (N, T, 3C) -> three (N, heads, T, C/heads)
        q, k, v = self.qkv(x).view(n, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(n, t, c))


class _Block(nn.Module):
    def __init__(self, shape: GPTShape) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(shape.width), nn.LayerNorm(shape.width)
        self.attention = _Attention(shape)
        self.mlp = nn.Sequential(nn.Linear(shape.width, 4 * shape.width), nn.GELU(),
                                 nn.Linear(4 * shape.width, shape.width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.ln1(x))
        return x + self.mlp(self.ln2(x))


def _init(module: nn.Module) -> None:
    """GPT-2's initialisation: weights N(0, 0.02), biases 0 (the default N(0, 1) embedding gives a first
    loss far above ln 256 through the tied head)."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)


class GPT(nn.Module):
    """Token ids (N, T) -> next-token logits (N, T, 256)."""

    def __init__(self, shape: GPTShape) -> None:
        super().__init__()
        self.shape = shape
        self.tokens = nn.Embedding(VOCAB, shape.width)
        self.positions = nn.Embedding(shape.max_len, shape.width)
        self.blocks = nn.ModuleList(_Block(shape) for _ in range(shape.layers))
        self.ln = nn.LayerNorm(shape.width)
        self.head = nn.Linear(shape.width, VOCAB, bias=False)
        self.head.weight = self.tokens.weight  # tied, as in GPT-2
        self.apply(_init)


    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Logits for every position of ids."""
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.tokens(ids) + self.positions(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))

    @torch.no_grad()
    def generate(self, prompt: torch.Tensor, new_tokens: int) -> torch.Tensor:
        """Greedy continuation of a (T,) prompt by new_tokens ids, within the preset's length."""
        ids = prompt.unsqueeze(0)
        for _ in range(new_tokens):
            logits = self(ids[:, -self.shape.max_len:])
            ids = torch.cat([ids, logits[:, -1].float().argmax(dim=-1, keepdim=True)], dim=1)
        return ids[0, len(prompt):]


def build_gpt(preset: str) -> GPT:
    """An untrained gpt of this preset; seed torch before calling."""
    return GPT(GPT_PRESETS[preset])
