"""Expert and context parallelism measured on every rank of a launched group (used by
`course-kit bench parallel`, shown in notebook 09 §6-7 beside the TP figures).

- `ep_on_rank`: the MoE layer (all-to-all dispatch and combine) against the single-process layer
  holding all experts: checked in float32 first, then timed in the run's dtype.
- `cp_on_rank`: ring attention (K/V blocks passed around the ring, overlapped with compute) against
  the same code on one rank holding the whole sequence: checked in float32 against SDPA on the
  full sequence, then timed, causal and not, with context.ring_attention (each step's send and
  receive posted as one batch, which NCCL needs).

World 1 is the single-GPU peer: the same code with nothing to send. Times are the slowest rank's
medians (measure.time_calls).
"""
from __future__ import annotations

from typing import Any


import torch
import torch.nn.functional as F

from .context import ring_attention
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


@torch.inference_mode()
def cp_on_rank(rank: int, world_size: int, batch: int, heads: int, seq: int, head_dim: int,
               dtype: str, check_seq: int = 256, warmup: int = 2, repeat: int = 5,
               seed: int = 0) -> list[dict[str, Any]]:
    """Ring attention over a sequence of `seq` tokens split over the group, causal and not."""
    dev = _device()
    rows = []
    for causal in (False, True):
        # correctness in float32 on a short sequence, against SDPA on the whole of it
        torch.manual_seed(seed)
        shape = (batch, heads, check_seq * world_size, head_dim)
        q, k, v = (torch.randn(shape, device=dev) for _ in range(3))
        a, b = rank * check_seq, (rank + 1) * check_seq
        want = F.scaled_dot_product_attention(q, k, v, is_causal=causal)[:, :, a:b]
        got, _ = ring_attention(q[:, :, a:b], k[:, :, a:b], v[:, :, a:b], causal)
        err = _rel(got, want)
        # timing in the run's dtype: this rank's chunk of the long sequence
        chunk = seq // world_size
        dt = getattr(torch, dtype)
        q, k, v = (torch.randn(batch, heads, chunk, head_dim, device=dev, dtype=dt) for _ in range(3))
        blocks = ring_attention(q, k, v, causal)[1]
        sec = time_calls(lambda: ring_attention(q, k, v, causal), dev, warmup, repeat)
        rows.append({"n": world_size, "causal": causal, "seq": seq, "median_s": sec, "blocks": blocks,
                     "kv_bytes_per_step": 2 * q.numel() * q.element_size(), "max_rel_err_fp32": err})
        del q, k, v
    return rows
