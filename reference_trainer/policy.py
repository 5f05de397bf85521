"""The policy: a small pre-norm causal transformer (about 167k parameters), fp32.

`forward` scores a whole batch of sequences (the trainer's path); `step` scores one new position per
row from a KV cache (the sampler's path). Both run the same modules in the same order, so the
sampler's recorded log-probabilities and the trainer's recomputation agree to fp32 rounding.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from .config import PolicyConfig


class Attention(nn.Module):
    def __init__(self, cfg: PolicyConfig):
        super().__init__()
        self.n_heads, self.d_head = cfg.n_heads, cfg.d_model // cfg.n_heads
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)

    def _heads(self, x):                                             # [B, T, D] -> [B, H, T, Dh]
        B, T, _ = x.shape
        return x.view(B, T, self.n_heads, self.d_head).transpose(1, 2)

    def forward(self, x, cache=None):
        """Causal self-attention; with `cache` (k, v so far), x is the newest position(s)."""
        q, k, v = (self._heads(t) for t in self.qkv(x).chunk(3, dim=-1))
        if cache is not None:
            k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
        T_q, T_k = q.shape[2], k.shape[2]
        att = (q @ k.transpose(-1, -2)) / math.sqrt(self.d_head)    # [B, H, Tq, Tk]
        causal = torch.ones(T_q, T_k, dtype=torch.bool).tril(diagonal=T_k - T_q)
        att = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)
        out = (att @ v).transpose(1, 2).reshape(x.shape)             # [B, Tq, D]
        return self.proj(out), (k, v)


class Block(nn.Module):
    def __init__(self, cfg: PolicyConfig):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
        self.attn = Attention(cfg)
        self.mlp = nn.Sequential(nn.Linear(cfg.d_model, 4 * cfg.d_model), nn.GELU(),
                                 nn.Linear(4 * cfg.d_model, cfg.d_model))

    def forward(self, x, cache=None):
        a, cache = self.attn(self.ln1(x), cache)
        x = x + a
        return x + self.mlp(self.ln2(x)), cache


class Policy(nn.Module):
    def __init__(self, vocab_size: int, cfg: PolicyConfig = PolicyConfig()):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(vocab_size, cfg.d_model)
        self.pos_emb = nn.Embedding(cfg.max_len, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, vocab_size, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Logits for every position: [B, T] -> [B, T, V]."""
        T = ids.shape[1]
        if T > self.cfg.max_len:
            raise ValueError(f"sequence of {T} tokens exceeds max_len {self.cfg.max_len}")
        x = self.tok_emb(ids) + self.pos_emb(torch.arange(T))
        for block in self.blocks:
            x, _ = block(x)
        return self.head(self.ln_f(x))

    def step(self, ids: torch.Tensor, pos: int, cache: list | None):
        """Logits for one new position per row: ids [B] at position `pos` -> ([B, V], new cache)."""
        if pos >= self.cfg.max_len:
            raise ValueError(f"position {pos} exceeds max_len {self.cfg.max_len}")
        x = self.tok_emb(ids[:, None]) + self.pos_emb(torch.tensor([pos]))
        new_cache = []
        for i, block in enumerate(self.blocks):
            x, c = block(x, None if cache is None else cache[i])
            new_cache.append(c)
        return self.head(self.ln_f(x))[:, -1], new_cache


def selected_log_probs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[target] per position: [B, T, V], [B, T] -> [B, T]."""
    return torch.log_softmax(logits, dim=-1).gather(-1, targets[..., None]).squeeze(-1)
