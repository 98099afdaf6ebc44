"""Grouped-query attention with PyTorch ops: causal SDPA, and one-query decode over a cache.

With GQA, H query heads share n_kv key/value heads in groups of H // n_kv (Llama, SmolLM). The
course model calls these two through its passes (models/llama.py):
- `sdpa_gqa`: SDPA with the K/V heads repeated to the query heads (prompt passes, prefill chunks);
- `decode_attention`: one query per sequence against a contiguous cache, without copying K/V
  (notebook 05's CUDA-graph decode step; the engine's CPU decode path).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def sdpa_gqa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
             scale: float, is_causal: bool = False) -> torch.Tensor:
    """SDPA with fewer KV heads than query heads (q [B, H, T, D], k/v [B, n_kv, S, D])."""
    if k.shape[1] != q.shape[1]:
        rep = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal, scale=scale)


def decode_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor,
                     scale: float) -> torch.Tensor:
    """One query per sequence over a contiguous cache; keys after `positions[b]` are masked out.

    q [B, H, D], k/v [B, n_kv, S, D] -> [B, H, D]. Grouped-query attention without copying K/V:
    the H query heads are viewed as [n_kv, H // n_kv] so each KV head is read once by its whole
    group. Static shapes and no host sync, so it can run inside a CUDA graph.
    """
    B, H, D = q.shape
    n_kv, S = k.shape[1], k.shape[2]
    qg = q.view(B, n_kv, H // n_kv, D)
    scores = torch.matmul(qg, k.transpose(-1, -2)).float() * scale          # [B, n_kv, G, S]
    masked = torch.arange(S, device=q.device)[None, :] > positions[:, None]  # [B, S]
    scores = scores.masked_fill(masked[:, None, None, :], float("-inf"))
    probs = torch.softmax(scores, dim=-1).to(v.dtype)
    return torch.matmul(probs, v).reshape(B, H, D)
