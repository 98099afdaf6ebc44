"""KV caches for the course model, and the attention functions that read them.

Two layouts:
- `StaticKVCache`: one contiguous [L, B, n_kv, S, D] tensor for K and one for V. Fixed shapes make
  the decode step capturable in a CUDA graph (notebook 05).
- `PagedKVCache`: [L, num_blocks, block_size, n_kv, D]; a sequence owns a list of blocks named by
  its row of a block table, so memory is handed out block by block (notebook 06, the engine).

Attention functions are plain callables so that other kernels (notebook 08's Triton kernel) can be
plugged into the model with `Transformer.set_attention`:
- decode attention:  fn(q[B, H, D], k[B, n_kv, S, D], v[B, n_kv, S, D], positions[B], scale) -> [B, H, D]
- paged attention:   fn(q[N, H, D], k_cache[num_blocks, bs, n_kv, D], v_cache, batch, scale) -> [N, H, D]
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F


class StaticKVCache:
    """Contiguous cache: k, v are [n_layers, max_batch, n_kv_heads, max_seq, head_dim]."""

    def __init__(self, cfg, max_batch: int, max_seq: int, dtype: torch.dtype = torch.float32,
                 device: str | torch.device = "cpu"):
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        if not 1 <= max_seq <= cfg.max_seq_len:
            raise ValueError(f"max_seq must be in [1, {cfg.max_seq_len}] (the model's max positions), "
                             f"got {max_seq}")
        shape = (cfg.n_layers, max_batch, cfg.n_kv_heads, max_seq, cfg.head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.max_batch, self.max_seq = max_batch, max_seq

    def nbytes(self) -> int:
        return self.k.numel() * self.k.element_size() * 2


class PagedKVCache:
    """Block-addressed cache: k, v are [n_layers, num_blocks, block_size, n_kv_heads, head_dim]."""

    def __init__(self, cfg, num_blocks: int, block_size: int, dtype: torch.dtype = torch.float32,
                 device: str | torch.device = "cpu"):
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"num_blocks and block_size must be >= 1, got {num_blocks}, {block_size}")
        shape = (cfg.n_layers, num_blocks, block_size, cfg.n_kv_heads, cfg.head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.num_blocks, self.block_size = num_blocks, block_size

    def nbytes(self) -> int:
        return self.k.numel() * self.k.element_size() * 2


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

    @property
    def num_seqs(self) -> int:
        return self.context_lens.shape[0]


# ----------------------------------------------------------------------------- decode attention

def decode_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor,
                     scale: float) -> torch.Tensor:
    """One query per sequence over a contiguous cache; keys after `positions[b]` are masked out.

    Grouped-query attention without copying K/V: the H query heads are viewed as
    [n_kv, H // n_kv] so each KV head is read once by its whole group. Static shapes and no host
    sync, so it can run inside a CUDA graph.
    """
    B, H, D = q.shape
    n_kv, S = k.shape[1], k.shape[2]
    qg = q.view(B, n_kv, H // n_kv, D)
    scores = torch.matmul(qg, k.transpose(-1, -2)).float() * scale          # [B, n_kv, G, S]
    masked = torch.arange(S, device=q.device)[None, :] > positions[:, None]  # [B, S]
    scores = scores.masked_fill(masked[:, None, None, :], float("-inf"))
    probs = torch.softmax(scores, dim=-1).to(v.dtype)
    return torch.matmul(probs, v).reshape(B, H, D)


# ----------------------------------------------------------------------------- paged attention

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
        o = _sdpa_gqa(q[lo:hi].transpose(0, 1)[None], k.transpose(0, 1)[None],
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
    o = _sdpa_gqa(qp.transpose(1, 2), k, v, allowed[:, None], scale)   # [B, H, max_q, D]
    return o.transpose(1, 2)[seq_of, row_of]


def _sdpa_gqa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
              scale: float, is_causal: bool = False) -> torch.Tensor:
    """SDPA with fewer KV heads than query heads (q [B, H, T, D], k/v [B, n_kv, S, D])."""
    if k.shape[1] != q.shape[1]:
        rep = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal, scale=scale)


DECODE_ATTENTION: dict[str, Callable] = {"grouped": decode_attention}
PAGED_ATTENTION: dict[str, Callable] = {
    "reference": paged_attention_reference,
    "gather": paged_attention_gather,
}


def register_attention(kind: str, name: str, fn: Callable) -> None:
    """Make a kernel selectable by name: kind is "decode" or "paged" (see the module docstring)."""
    table = {"decode": DECODE_ATTENTION, "paged": PAGED_ATTENTION}.get(kind)
    if table is None:
        raise ValueError(f"kind must be 'decode' or 'paged', got {kind!r}")
    table[name] = fn
