"""Context parallelism: ring attention over a sequence split across ranks.

Rank r holds the queries, keys and values of the r-th chunk of the sequence. Its queries must see
every chunk's keys and values, so the K/V blocks travel around a ring: at each of the n steps a
rank attends its queries to the block it holds while passing that block on to the next rank
(sending the next block overlaps with computing on this one). The partial results are merged
exactly with the online softmax (the running max and sum of flash attention), so the output
equals full attention: each block is one step of notebook 08's tiled forward
(`attention.tiled.tiled_block_step`, which folds with `online_softmax_update`). With a causal
mask, rank r only needs blocks 0..r: the last rank does n blocks of work and the first one,
which is why real systems reorder the chunks ("zigzag").
This module computes the forward pass.

How much faster n ranks can be is set by the blocks, not by the ring. The fair one-rank peer is
`blockwise_attention`: the same `tiled_block_step` over the same S/n chunks on one rank, skipping
the blocks above the diagonal. Counting score elements (a diagonal block is computed whole, then
masked), one rank does c·c blocks of (S/c)² without a mask and c(c+1)/2 with one, where the ring's
busiest rank does n blocks of (S/n)² either way. So the split allows at most n without a mask and
(n+1)/2 with one at c = n (`speedup_bound`); against one whole S x S block (c = 1, masked rather
than skipped) it is n in both cases, and a ratio above that measures the block size, not the split.
"""
from __future__ import annotations

import math
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from ..attention.tiled import tiled_block_step
from .comm import world


def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                   group: Any = None) -> tuple[torch.Tensor, int]:
    """Attention of this rank's chunk q [B, H, S/n, D] over the whole sequence.

    k and v are this rank's chunk; the others arrive around the ring. Returns the output chunk
    and the number of K/V blocks this rank computed on.
    """
    rank, n = world(group)
    scale = 1.0 / math.sqrt(q.shape[-1])
    acc = torch.zeros_like(q)
    m = torch.full(q.shape[:-1], float("-inf"), dtype=q.dtype, device=q.device)
    l = torch.zeros(q.shape[:-1], dtype=q.dtype, device=q.device)
    kv = torch.stack([k, v]).contiguous()
    diag = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
    blocks = 0
    for step in range(n):
        j = (rank - step) % n  # the chunk index of the block held at this step
        reqs = []
        if step < n - 1:  # pass the block on while computing with it
            nxt = torch.empty_like(kv)
            # one batch: posted one by one, NCCL can deadlock on large blocks (each rank's send
            # waits for a receive its neighbour has not posted yet)
            reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, kv, (rank + 1) % n, group),
                                           dist.P2POp(dist.irecv, nxt, (rank - 1) % n, group)])
        if not causal or j < rank:
            m, l, acc = tiled_block_step(q, kv[0], kv[1], m, l, acc, scale)
            blocks += 1
        elif j == rank:
            m, l, acc = tiled_block_step(q, kv[0], kv[1], m, l, acc, scale, diag)
            blocks += 1
        for r in reqs:
            r.wait()
        if step < n - 1:
            kv = nxt
    return acc / l[..., None], blocks


def blockwise_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                        chunks: int = 1) -> tuple[torch.Tensor, int]:
    """Attention over the whole sequence on one rank, with the ring's kernel: q, k, v [B, H, S, D]
    cut into `chunks` blocks of S/chunks; each query chunk folds the key chunks it needs with
    `tiled_block_step`, skipping those above the diagonal when causal (the diagonal one masked).
    Returns the output and the number of blocks computed (the one-rank peer of ring_attention)."""
    s = q.shape[-2]
    if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1 or s % chunks:
        raise ValueError(f"chunks={chunks!r} must be an integer >= 1 that divides the sequence ({s})")
    c = s // chunks
    scale = 1.0 / math.sqrt(q.shape[-1])
    diag = torch.ones(c, c, dtype=torch.bool, device=q.device).tril()
    out, blocks = torch.empty_like(q), 0
    for i in range(chunks):
        qi = q[..., i * c:(i + 1) * c, :]
        acc = torch.zeros_like(qi)
        m = torch.full(qi.shape[:-1], float("-inf"), dtype=q.dtype, device=q.device)
        l = torch.zeros(qi.shape[:-1], dtype=q.dtype, device=q.device)
        for j in range(i + 1 if causal else chunks):
            kj, vj = k[..., j * c:(j + 1) * c, :], v[..., j * c:(j + 1) * c, :]
            m, l, acc = tiled_block_step(qi, kj, vj, m, l, acc, scale, diag if causal and j == i else None)
            blocks += 1
        out[..., i * c:(i + 1) * c, :] = acc / l[..., None]
    return out, blocks


def speedup_bound(n: int, causal: bool, baseline_chunks: int) -> float:
    """The most n ranks of ring_attention can gain over one rank running blockwise_attention with
    `baseline_chunks` chunks, counting the score elements each computes (module docstring)."""
    for name, v in (("n", n), ("baseline_chunks", baseline_chunks)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name}={v!r}; it must be an integer >= 1")
    c = baseline_chunks
    one_rank = (c * (c + 1) / 2 if causal else c * c) / c ** 2   # in units of S²
    busiest = n / n ** 2                                        # n blocks of (S/n)²: the last rank's
    return one_rank / busiest


def check_cp(rank: int, world_size: int, batch: int = 2, heads: int = 4, seq_per_rank: int = 16,
             head_dim: int = 16, seed: int = 0) -> dict[str, Any]:
    """Ring attention against SDPA on the full sequence, causal and not."""
    torch.manual_seed(seed)
    shape = (batch, heads, seq_per_rank * world_size, head_dim)
    q, k, v = torch.randn(shape), torch.randn(shape), torch.randn(shape)
    lo, hi = rank * seq_per_rank, (rank + 1) * seq_per_rank
    out: dict[str, Any] = {}
    for causal in (False, True):
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)[:, :, lo:hi]
        got, blocks = ring_attention(q[:, :, lo:hi], k[:, :, lo:hi], v[:, :, lo:hi], causal)
        name = "causal" if causal else "full"
        out[name] = float((ref - got).abs().max() / ref.abs().max())
        out[f"{name}_blocks"] = blocks
    return out
