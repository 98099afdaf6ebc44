"""Attention over a paged KV cache, in PyTorch: what one paged forward step reads (notebook 06).

A paged cache is [num_blocks, block_size, n_kv, D] per layer (models/kv_cache.PagedKVCache); a
sequence owns the blocks named by its row of a block table, so its token t lives in block
table[t // block_size] at offset t % block_size. `PagedBatch` describes one step: the new tokens
of B sequences, concatenated. Two implementations of fn(q [N, H, D], k_cache, v_cache, batch,
scale) -> [N, H, D], each new token attending to every key at a position <= its own:

- `paged_attention_reference`: one sequence at a time, its blocks gathered, SDPA (readable;
  the CPU default of the course model);
- `paged_attention_gather`: every sequence's blocks gathered into one padded tensor at once (the
  CUDA default of the model outside the engine).

The engine's own step attention (decodes and prefill chunks, Triton on a GPU) is engine_step.py.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .gqa import decode_attention, sdpa_gqa

TILE_M = 16     # varlen mode: query tokens per tile (one sequence's tokens per tile)


@dataclass
class PagedBatch:
    """One step of a paged forward: the new tokens of B sequences, concatenated (N tokens in all)."""
    tokens: torch.Tensor        # [N] int64
    positions: torch.Tensor     # [N] int64, position of each new token in its sequence
    slot_mapping: torch.Tensor  # [N] int64, block * block_size + offset where its K/V is written
    query_start: torch.Tensor   # [B+1] int32, cumulative new-token counts
    context_lens: torch.Tensor  # [B] int32, sequence lengths after this step
    block_tables: torch.Tensor  # [B, max_blocks] int32, -1 padded
    max_query_len: int | None = None  # optional: saves a device->host sync in the gather path


def _seq_kv(cache: torch.Tensor, table_row: torch.Tensor, length: int) -> torch.Tensor:
    """K or V of one sequence, [length, n_kv, D], gathered from its blocks."""
    block_size = cache.shape[1]
    n_blocks = -(-length // block_size)
    blocks = table_row[:n_blocks].long()
    return cache[blocks].reshape(-1, *cache.shape[2:])[:length]


def paged_attention_reference(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                              batch: PagedBatch, scale: float) -> torch.Tensor:
    """The readable, obviously-correct path: one sequence at a time, gather its blocks, run SDPA.

    Each new token attends to every key at a position <= its own (causal within the sequence).
    """
    out = torch.empty_like(q)
    starts = batch.query_start.tolist()
    lengths = batch.context_lens.tolist()
    for b, length in enumerate(lengths):
        lo, hi = starts[b], starts[b + 1]
        if hi == lo:
            continue
        k = _seq_kv(k_cache, batch.block_tables[b], length)        # [L, n_kv, D]
        v = _seq_kv(v_cache, batch.block_tables[b], length)
        key_pos = torch.arange(length, device=q.device)
        allowed = key_pos[None, :] <= batch.positions[lo:hi, None]  # [n, L]
        o = sdpa_gqa(q[lo:hi].transpose(0, 1)[None], k.transpose(0, 1)[None],
                     v.transpose(0, 1)[None], allowed[None, None], scale)
        out[lo:hi] = o[0].transpose(0, 1)
    return out


def paged_attention_gather(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           batch: PagedBatch, scale: float) -> torch.Tensor:
    """The batched path: gather every sequence's blocks into a padded [B, n_kv, S, D] view.

    Decode-only steps (one new token per sequence) use `decode_attention` on the gathered K/V;
    mixed steps pad the queries to [B, max_query_len] and use SDPA with a mask.
    """
    B, max_blocks = batch.block_tables.shape
    tables = batch.block_tables.clamp(min=0).long()
    k = k_cache[tables].flatten(1, 2).transpose(1, 2)   # [B, n_kv, S, D], S = max_blocks * bs
    v = v_cache[tables].flatten(1, 2).transpose(1, 2)
    N, H, D = q.shape
    S = k.shape[2]
    key_pos = torch.arange(S, device=q.device)
    max_q = batch.max_query_len
    if max_q is None:
        max_q = int((batch.query_start[1:] - batch.query_start[:-1]).max())
    if max_q == 1 and N == B:
        # keys beyond the context are also beyond the query's position, so positions mask both
        return decode_attention(q, k, v, batch.positions, scale)
    q_lens = (batch.query_start[1:] - batch.query_start[:-1]).long()
    seq_of = torch.repeat_interleave(torch.arange(B, device=q.device), q_lens, output_size=N)
    row_of = torch.arange(N, device=q.device) - batch.query_start[:-1].long()[seq_of]
    qp = q.new_zeros(B, max_q, H, D)
    qp[seq_of, row_of] = q
    pos = torch.full((B, max_q), -1, dtype=torch.long, device=q.device)
    pos[seq_of, row_of] = batch.positions
    allowed = key_pos[None, None, :] <= pos[..., None]        # [B, max_q, S]
    allowed = allowed | (pos < 0)[..., None]                  # padded rows: anything, result dropped
    o = sdpa_gqa(qp.transpose(1, 2), k, v, allowed[:, None], scale)   # [B, H, max_q, D]
    return o.transpose(1, 2)[seq_of, row_of]
