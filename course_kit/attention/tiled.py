"""Tiled (flash) attention forward in pure PyTorch: the algorithm of the Triton kernel, readable.

For each block of BLOCK_M queries we walk over the keys in blocks of BLOCK_N and keep, per query
row, a running max m, a running softmax denominator l and an unnormalised output acc = sum P V.
Each new key block updates them with the online-softmax rescaling (see online_softmax.py):

    s     = q_blk @ k_blk^T * scale                 [BLOCK_M, BLOCK_N], never the full S x S
    m_new = max(m, rowmax(s))
    alpha = exp(m - m_new)                          rescales what was accumulated so far
    p     = exp(s - m_new)
    l     = l * alpha + rowsum(p)
    acc   = acc * alpha + p @ v_blk

and the output is acc / l. Only [BLOCK_M, BLOCK_N] scores exist at any time, so memory is linear
in the sequence length. With a causal mask, key blocks entirely above the diagonal are skipped.
"""
from __future__ import annotations

import math

import torch

from .naive import _check_shapes, expand_kv
from .online_softmax import online_softmax_update


def tiled_block_step(q_blk: torch.Tensor, k_blk: torch.Tensor, v_blk: torch.Tensor, m: torch.Tensor,
                     l: torch.Tensor, acc: torch.Tensor, scale: float,
                     mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One key block of the tiled forward for one query block.

    q_blk: [..., M, D]; k_blk, v_blk: [..., N, D]; m, l: [..., M]; acc: [..., M, D] (float32 or wider).
    mask: optional bool [M, N], True where the query may attend to the key. Returns the new (m, l, acc).
    """
    s = (q_blk.to(acc.dtype) @ k_blk.to(acc.dtype).transpose(-2, -1)) * scale
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    # a row whose keys so far are all masked keeps m = -inf; the fold gives it 0, not NaN
    return online_softmax_update(m, l, s, acc, v_blk.to(acc.dtype))


def tiled_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
                    scale: float | None = None, block_m: int = 64, block_n: int = 64) -> torch.Tensor:
    """Flash-attention forward with Python loops over blocks. q: [B, Hq, Sq, D], k/v: [B, Hkv, Sk, D].

    Accumulates in float32 (float64 for float64 inputs) and returns q's dtype. Causal masks are
    top-left aligned, as in SDPA's is_causal.
    """
    _check_shapes(q, k, v)
    if block_m < 1 or block_n < 1:
        raise ValueError(f"block_m and block_n must be >= 1; got {block_m}, {block_n}")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    k, v = expand_kv(k, q.shape[1]), expand_kv(v, q.shape[1])
    s_q, s_k = q.shape[2], k.shape[2]
    acc_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    out = torch.empty_like(q)
    for qs in range(0, s_q, block_m):
        qe = min(qs + block_m, s_q)
        q_blk = q[:, :, qs:qe]
        m = torch.full(q_blk.shape[:-1], float("-inf"), dtype=acc_dtype, device=q.device)
        l = torch.zeros(q_blk.shape[:-1], dtype=acc_dtype, device=q.device)
        acc = torch.zeros(q_blk.shape, dtype=acc_dtype, device=q.device)
        # causal: the last query of this block is qe - 1, so keys from qe on are never needed
        k_end = min(s_k, qe) if causal else s_k
        for ks in range(0, k_end, block_n):
            ke = min(ks + block_n, k_end)
            mask = None
            if causal and ke - 1 > qs:      # the block touches the diagonal: mask j > i
                rows = torch.arange(qs, qe, device=q.device).unsqueeze(1)
                cols = torch.arange(ks, ke, device=q.device).unsqueeze(0)
                mask = cols <= rows
            m, l, acc = tiled_block_step(q_blk, k[:, :, ks:ke], v[:, :, ks:ke], m, l, acc, scale, mask)
        out[:, :, qs:qe] = (acc / l.unsqueeze(-1)).to(q.dtype)
    return out
