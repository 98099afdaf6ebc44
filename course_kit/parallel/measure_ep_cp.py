"""Expert and context parallelism measured on every rank of a launched group (used by
`course-kit bench parallel`, shown in notebook 09 §6-7 beside the TP figures).

- `ep_on_rank`: the MoE layer (all-to-all dispatch and combine) against the single-process layer
  holding all experts: checked in float32 first, then timed in the run's dtype.
- `cp_on_rank`: ring attention (K/V blocks passed around the ring, overlapped with compute): checked
  in float32 against SDPA on the full sequence, then timed, causal and not, with
  context.ring_attention (each step's send and receive posted as one batch, which NCCL needs). On
  one rank it times the peers: the same code with the whole sequence as one block (chunks 1, masked
  rather than skipped when causal) and, for each group size n of the run (`baseline_chunks`),
  context.blockwise_attention with n chunks, the fair peer of n ranks: the same blocks, the ones
  above the diagonal skipped. Each row carries the busiest rank's block count.

World 1 is the single-GPU peer: the same code with nothing to send. Times are the slowest rank's
medians (measure.time_calls).
"""
from __future__ import annotations

from typing import Any, Sequence

import torch
import torch.distributed as dist
import torch.nn.functional as F

from .context import blockwise_attention, ring_attention
from .expert import EPMoE, MoE
from .measure import _device, time_calls


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-30))


@torch.inference_mode()
def ep_on_rank(rank: int, world_size: int, hidden: int, ffn: int, n_experts: int, top_k: int,
               tokens_per_rank: int, dtype: str, warmup: int = 3, repeat: int = 10,
               seed: int = 0) -> dict[str, Any]:
    """Forward of the MoE layer over this group's tokens: one rank with every expert (world 1) or
    the experts spread over the ranks, each rank routing its own tokens_per_rank tokens."""
    dev = _device()
    lo, hi = rank * tokens_per_rank, (rank + 1) * tokens_per_rank

    def build(dt: torch.dtype) -> tuple[torch.nn.Module, torch.nn.Module, torch.Tensor]:
        torch.manual_seed(seed)
        with torch.device(dev):
            ref = MoE(hidden, ffn, n_experts, top_k).to(dt)
            x = torch.randn(world_size * tokens_per_rank, hidden, dtype=dt)
        return ref, (EPMoE(ref).to(dev, dt) if world_size > 1 else ref), x

    ref, layer, x = build(torch.float32)
    err = 0.0 if world_size == 1 else _rel(layer(x[lo:hi]), ref(x)[lo:hi])
    del ref, layer, x
    ref, layer, x = build(getattr(torch, dtype))
    mine = x[lo:hi] if world_size > 1 else x          # world 1: the one GPU routes every token
    if world_size > 1:
        del ref
    sec = time_calls(lambda: layer(mine), dev, warmup, repeat)
    return {"n": world_size, "median_s": sec, "tokens": world_size * tokens_per_rank,
            "max_rel_err_fp32": err, "experts_per_rank": n_experts // world_size}


def _busiest(blocks: int, dev: torch.device) -> int:
    """The most blocks any rank of the group computed (the rank the others wait for)."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return blocks
    t = torch.tensor([blocks], dtype=torch.int64, device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.item())


@torch.inference_mode()
def cp_on_rank(rank: int, world_size: int, batch: int, heads: int, seq: int, head_dim: int,
               dtype: str, check_seq: int = 256, warmup: int = 2, repeat: int = 5,
               seed: int = 0, baseline_chunks: Sequence[int] = ()) -> list[dict[str, Any]]:
    """Ring attention over a sequence of `seq` tokens split over the group, causal and not; on one
    rank, also blockwise_attention with each of `baseline_chunks` chunks (the fair peers)."""
    dev = _device()
    rows = []
    peers = [c for c in baseline_chunks if world_size == 1 and c > 1 and seq % c == 0 and check_seq % c == 0]
    for causal in (False, True):
        # correctness in float32 on a short sequence, against SDPA on the whole of it
        torch.manual_seed(seed)
        shape = (batch, heads, check_seq * world_size, head_dim)
        q, k, v = (torch.randn(shape, device=dev) for _ in range(3))
        a, b = rank * check_seq, (rank + 1) * check_seq
        want = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        got, _ = ring_attention(q[:, :, a:b], k[:, :, a:b], v[:, :, a:b], causal)
        err = _rel(got, want[:, :, a:b])
        peer_err = {c: _rel(blockwise_attention(q, k, v, causal, c)[0], want) for c in peers}
        # timing in the run's dtype: this rank's chunk of the long sequence
        chunk = seq // world_size
        dt = getattr(torch, dtype)
        q, k, v = (torch.randn(batch, heads, chunk, head_dim, device=dev, dtype=dt) for _ in range(3))
        blocks = ring_attention(q, k, v, causal)[1]
        sec = time_calls(lambda: ring_attention(q, k, v, causal), dev, warmup, repeat)
        rows.append({"n": world_size, "causal": causal, "seq": seq, "median_s": sec, "blocks": blocks,
                     "busiest_blocks": _busiest(blocks, dev), "chunks": world_size,
                     "kv_bytes_per_step": 2 * q.numel() * q.element_size(), "max_rel_err_fp32": err})
        for c in peers:         # one rank, the same blocks as c ranks would use
            blocks = blockwise_attention(q, k, v, causal, c)[1]
            sec = time_calls(lambda c=c: blockwise_attention(q, k, v, causal, c), dev, warmup, repeat)
            rows.append({"n": 1, "causal": causal, "seq": seq, "median_s": sec, "blocks": blocks,
                         "busiest_blocks": blocks, "chunks": c, "baseline": "blockwise",
                         "max_rel_err_fp32": peer_err[c]})
        del q, k, v
    return rows
