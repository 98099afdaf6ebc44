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
