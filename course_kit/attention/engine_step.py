"""Attention for one step of the engine: decodes and prefill chunks over the paged cache (notebook 06).

The engine's model runner orders each step's rows as decodes first (one new token each), then
prefill chunks, and attaches host-side facts about that split to the batch (`EngineBatch`), so
no device->host sync is needed to read them back. `engine_attention` is the paged-attention
function the runner hands to the model (`model.set_attention(paged=engine_attention)`):

- varlen mode (GPU): the batch carries query tiles, and one Triton kernel handles decodes and
  prefill chunks alike (paged_triton.paged_varlen_triton);
- decode rows: on a GPU a Triton kernel walks the block table directly (flash-decoding,
  paged_triton.paged_decode_triton; `registry.triton_kernels` decides, the runner marks the batch);
  on a CPU the blocks are gathered into a padded tensor and
  attended with PyTorch ops (gqa.decode_attention). Both are static-shape and sync-free, so a
  decode step can be captured in a CUDA graph.
- prefill rows: per sequence, its blocks are gathered and SDPA runs with a causal mask offset by
  the tokens already in the cache (chunked prefill, prefix hits). A prefill with nothing cached
  yet is plain causal attention (`is_causal=True`, so SDPA may pick its flash backend).

The Triton kernels are imported only when a CUDA tensor needs them, so the engine runs on a CPU
without Triton and without switching Triton to its interpreter.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from .gqa import decode_attention
from .paged import TILE_M, PagedBatch, paged_attention_reference  # noqa: F401 (TILE_M: the runner's tiles)


@dataclass
class EngineBatch(PagedBatch):
    num_decode: int = 0                                           # rows [0, num_decode) decode
    prefills: list[tuple[int, int, int, int]] = field(default_factory=list)  # (row, lo, hi, ctx)
    # varlen mode (GPU): query tiles of at most TILE_M tokens, each from one row: (row, start, len),
    # row -1 for unused tiles. One kernel then handles decodes and prefill chunks alike.
    tiles: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
    # decode rows through the Triton kernel (registry.triton_kernels decides; the runner sets it)
    triton_decode: bool = False


def gather_decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, tables: torch.Tensor,
                  positions: torch.Tensor, scale: float) -> torch.Tensor:
    """PyTorch decode: gather each sequence's blocks into [B, n_kv, S, D], mask by position."""
    t = tables.clamp(min=0).long()
    k = k_cache[t].flatten(1, 2).transpose(1, 2)
    v = v_cache[t].flatten(1, 2).transpose(1, 2)
    return decode_attention(q, k, v, positions, scale)


def prefill_chunk(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, table: torch.Tensor,
                  ctx: int, scale: float) -> torch.Tensor:
    """One sequence's chunk of n new tokens (the last n of its ctx tokens): q [n, H, D] -> [n, H, D]."""
    n = q.shape[0]
    bs = k_cache.shape[1]
    blocks = table[: -(-ctx // bs)].long()
    k = k_cache[blocks].flatten(0, 1)[:ctx].transpose(0, 1)[None]     # [1, n_kv, ctx, D]
    v = v_cache[blocks].flatten(0, 1)[:ctx].transpose(0, 1)[None]
    qh = q.transpose(0, 1)[None]                                          # [1, H, n, D]
    if k.shape[1] != qh.shape[1]:
        rep = qh.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    if n == ctx:
        o = F.scaled_dot_product_attention(qh, k, v, is_causal=True, scale=scale)
    else:
        key_pos = torch.arange(ctx, device=q.device)
        mask = key_pos[None, :] <= (ctx - n + torch.arange(n, device=q.device))[:, None]
        o = F.scaled_dot_product_attention(qh, k, v, attn_mask=mask[None, None], scale=scale)
    return o[0].transpose(0, 1)


def engine_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                     batch: PagedBatch, scale: float) -> torch.Tensor:
    """The engine's paged attention (the signature of registry.PAGED_ATTENTION entries)."""
    if not isinstance(batch, EngineBatch):
        return paged_attention_reference(q, k_cache, v_cache, batch, scale)
    if batch.tiles is not None:
        from .paged_triton import paged_varlen_triton
        return paged_varlen_triton(q.contiguous(), k_cache, v_cache, batch.block_tables, batch.positions,
                                   batch.tiles, scale)
    nd = batch.num_decode
    if nd == q.shape[0] and not batch.prefills:
        return _decode(q, k_cache, v_cache, batch, scale)
    out = torch.empty_like(q)
    if nd:
        out[:nd] = _decode(q[:nd], k_cache, v_cache, batch, scale, nd)
    for row, lo, hi, ctx in batch.prefills:
        out[lo:hi] = prefill_chunk(q[lo:hi], k_cache, v_cache, batch.block_tables[row], ctx, scale)
    return out


def _decode(q, k_cache, v_cache, batch, scale, nd=None):
    tables = batch.block_tables if nd is None else batch.block_tables[:nd]
    if batch.triton_decode:
        from .paged_triton import paged_decode_triton
        ctx = batch.context_lens if nd is None else batch.context_lens[:nd]
        return paged_decode_triton(q.contiguous(), k_cache, v_cache, tables, ctx, scale)
    positions = batch.positions if nd is None else batch.positions[:nd]
    return gather_decode(q, k_cache, v_cache, tables, positions, scale)
