"""Choosing the next token from logits: greedy, temperature, top-k, top-p.

Sampling uses the Gumbel-max trick: argmax(logits / T + g) with g = -log(-log(u)), u ~ U(0, 1),
picks token i with probability softmax(logits / T)[i]. It needs only elementwise ops and an
argmax: no `multinomial`, no host sync, static shapes. So the same function runs inside a CUDA
graph when the uniform noise `u` is passed in from a static buffer (notebook 05).
"""
from __future__ import annotations

import torch


def filter_logits(logits: torch.Tensor, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """Set to -inf every logit outside the top-k and outside the smallest set with mass >= top_p."""
    V = logits.shape[-1]
    if top_k < 0 or top_k > V:
        raise ValueError(f"top_k must be in [0, {V}] (0 = off), got {top_k}")
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1] (1 = off), got {top_p}")
    if 0 < top_k < V:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits.float(), dim=-1)
        # drop a token when the tokens ranked above it already hold top_p of the mass
        drop_sorted = (probs.cumsum(-1) - probs) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def warp(logits: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """The logits a sampled token is drawn from: divided by the temperature first, then cut to the
    top-k and top-p. The order is HF's (temperature, then top-k, then top-p warpers): top-p keeps
    the smallest set holding `top_p` of the mass *at this temperature*, so a hotter sample keeps
    more tokens."""
    if temperature <= 0:
        raise ValueError(f"warp needs a temperature > 0 (0 is greedy), got {temperature}")
    return filter_logits(logits.float() / temperature, top_k, top_p)


def sample(logits: torch.Tensor, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
           generator: torch.Generator | None = None, uniform: torch.Tensor | None = None) -> torch.Tensor:
    """logits [B, V] -> token ids [B] (int64). temperature 0 is greedy (argmax).

    generator: a seeded torch.Generator on the logits' device, for reproducible draws.
    uniform:   [B, V] noise in (0, 1) supplied by the caller instead (graph-safe sampling).
    """
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0 (0 = greedy), got {temperature}")
    if logits.dim() != 2:
        raise ValueError(f"logits must be [batch, vocab], got shape {tuple(logits.shape)}")
    if temperature == 0.0:
        return logits.argmax(dim=-1)
    scaled = warp(logits, temperature, top_k, top_p)
    if uniform is None:
        uniform = torch.rand(scaled.shape, generator=generator, device=scaled.device)
    # clamp away from 0 and 1 so the double log stays finite
    u = uniform.float().clamp(1e-10, 1.0 - 1e-7)
    return (scaled - torch.log(-torch.log(u))).argmax(dim=-1)
