"""Attention over the paged KV cache, as the engine runs it.

The engine orders each step's rows as decodes first (one new token each), then prefill chunks.
It attaches host-side facts about that split to the batch (`EngineBatch.num_decode`,
`EngineBatch.prefills`), so no device->host sync is needed to read them back:

- decode rows: one query per sequence against its blocks. On a GPU a Triton kernel walks the block
  table directly (online softmax, one program per sequence, K/V head and slice of the context,
  the slices merged by a second kernel: flash-decoding); on a CPU the blocks are gathered into a
  padded tensor and attended with PyTorch ops. Both are static-shape and sync-free, so a decode
  step can be captured in a CUDA graph.
- prefill rows: per sequence, its blocks are gathered and SDPA runs with a causal mask offset by
  the tokens already in the cache (chunked prefill, prefix hits). A prefill with nothing cached
  yet is plain causal attention (`is_causal=True`, so SDPA may pick its flash backend).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from ..models.kv_cache import PagedBatch, decode_attention, register_attention

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - triton is optional on CPU
    triton = None


@dataclass
class EngineBatch(PagedBatch):
    num_decode: int = 0                                           # rows [0, num_decode) decode
    prefills: list[tuple[int, int, int, int]] = field(default_factory=list)  # (row, lo, hi, ctx)
    # varlen mode (GPU): query tiles of at most TILE_M tokens, each from one row: (row, start, len),
    # row -1 for unused tiles. One kernel then handles decodes and prefill chunks alike.
    tiles: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None


TILE_M = 16


def _gather_decode(q, k_cache, v_cache, tables, positions, scale):
    """PyTorch decode: gather each sequence's blocks into [B, n_kv, S, D], mask by position."""
    t = tables.clamp(min=0).long()
    k = k_cache[t].flatten(1, 2).transpose(1, 2)
    v = v_cache[t].flatten(1, 2).transpose(1, 2)
    return decode_attention(q, k, v, positions, scale)


if triton is not None:
    @triton.jit
    def _attend_blocks(q, m, l, acc, k_ptr, v_ptr, table_row_ptr, kvh, lo, hi, qpos, d, dmask, scale,
                       stride_kb, stride_kt, stride_kh, BS: tl.constexpr, BLOCK_N: tl.constexpr,
                       CAUSAL: tl.constexpr, PREC: tl.constexpr):
        """The online softmax of notebook 08 over keys [lo, hi) of one sequence, read through its
        block table row: key t lives in block table[t // BS] at offset t % BS. Returns the
        updated (m, l, acc). CAUSAL masks key positions after each query's `qpos`."""
        for start in range(lo, hi, BLOCK_N):
            t = start + tl.arange(0, BLOCK_N)
            tmask = t < hi
            block = tl.load(table_row_ptr + t // BS, mask=tmask, other=0).to(tl.int64)
            base = block * stride_kb + (t % BS) * stride_kt + kvh * stride_kh
            kv_mask = tmask[:, None] & dmask[None, :]
            k = tl.load(k_ptr + base[:, None] + d[None, :], mask=kv_mask, other=0.0)
            s = tl.dot(q, tl.trans(k), input_precision=PREC) * scale      # [rows, BLOCK_N] fp32
            if CAUSAL:
                s = tl.where((t[None, :] <= qpos[:, None]) & tmask[None, :], s, float("-inf"))
            else:
                s = tl.where(tmask[None, :], s, float("-inf"))
            m_new = tl.maximum(m, tl.max(s, 1))
            alpha = tl.exp(m - m_new)
            p = tl.exp(s - m_new[:, None])
            v = tl.load(v_ptr + base[:, None] + d[None, :], mask=kv_mask, other=0.0)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PREC)
            l = l * alpha + tl.sum(p, 1)
            m = m_new
        return m, l, acc


if triton is not None:
    @triton.jit
    def _paged_decode_kernel(q_ptr, k_ptr, v_ptr, table_ptr, ctx_ptr, out_ptr, part_ptr, lse_ptr, scale,
                             stride_qn, stride_qh, stride_kb, stride_kt, stride_kh, stride_tb,
                             stride_on, stride_oh, H,
                             G: tl.constexpr, GP: tl.constexpr, D: tl.constexpr, DP: tl.constexpr,
                             BS: tl.constexpr, BLOCK_N: tl.constexpr, SPLITS: tl.constexpr,
                             PREC: tl.constexpr):
        # one program: one sequence, one K/V head (all G query heads that share it, so each K/V
        # tile is loaded once for G queries), one of SPLITS slices of the context
        seq = tl.program_id(0)
        kvh = tl.program_id(1)
        split = tl.program_id(2)
        g = tl.arange(0, GP)
        d = tl.arange(0, DP)
        gmask = g < G
        dmask = d < D
        heads = kvh * G + g
        q = tl.load(q_ptr + seq * stride_qn + heads[:, None] * stride_qh + d[None, :],
                    mask=gmask[:, None] & dmask[None, :], other=0.0)
        ctx = tl.load(ctx_ptr + seq)
        chunk = tl.cdiv(tl.cdiv(ctx, SPLITS), BLOCK_N) * BLOCK_N     # whole tiles per slice
        lo = split * chunk
        hi = tl.minimum(ctx, lo + chunk)
        m = tl.full([GP], float("-inf"), tl.float32)
        l = tl.zeros([GP], tl.float32)
        acc = tl.zeros([GP, DP], tl.float32)
        m, l, acc = _attend_blocks(q, m, l, acc, k_ptr, v_ptr, table_ptr + seq * stride_tb, kvh, lo, hi,
                                   hi, d, dmask, scale, stride_kb, stride_kt, stride_kh,
                                   BS=BS, BLOCK_N=BLOCK_N, CAUSAL=False, PREC=PREC)
        omask = gmask[:, None] & dmask[None, :]
        if SPLITS == 1:
            out = acc / l[:, None]
            tl.store(out_ptr + seq * stride_on + heads[:, None] * stride_oh + d[None, :],
                     out.to(out_ptr.dtype.element_ty), mask=omask)
        else:
            # this slice's softmax-weighted mean and its log-sum-exp; an empty slice (a short
            # context) has lse = -inf and weighs nothing when the slices are merged
            l_safe = tl.where(l > 0, l, 1.0)
            lse = tl.where(l > 0, m + tl.log(l_safe), float("-inf"))
            row = (seq * H + heads) * SPLITS + split
            tl.store(part_ptr + row[:, None] * D + d[None, :], acc / l_safe[:, None], mask=omask)
            tl.store(lse_ptr + row, lse, mask=gmask)

    @triton.jit
    def _merge_splits_kernel(part_ptr, lse_ptr, out_ptr, stride_on, stride_oh, H,
                             SPLITS: tl.constexpr, SP: tl.constexpr, D: tl.constexpr, DP: tl.constexpr):
        # the online-softmax merge of notebook 08, done once over the SPLITS partial results
        seq = tl.program_id(0)
        h = tl.program_id(1)
        sp = tl.arange(0, SP)
        d = tl.arange(0, DP)
        smask = sp < SPLITS
        rows = (seq * H + h) * SPLITS + sp
        lse = tl.load(lse_ptr + rows, mask=smask, other=float("-inf"))
        w = tl.exp(lse - tl.max(lse, 0))
        o = tl.load(part_ptr + rows[:, None] * D + d[None, :], mask=smask[:, None] & (d < D)[None, :], other=0.0)
        out = tl.sum(o * w[:, None], 0) / tl.sum(w, 0)
        tl.store(out_ptr + seq * stride_on + h * stride_oh + d, out.to(out_ptr.dtype.element_ty), mask=d < D)


if triton is not None:
    @triton.jit
    def _paged_varlen_kernel(q_ptr, k_ptr, v_ptr, table_ptr, pos_ptr, tile_row_ptr, tile_start_ptr,
                             tile_len_ptr, out_ptr, scale,
                             stride_qn, stride_qh, stride_kb, stride_kt, stride_kh, stride_tb,
                             stride_on, stride_oh,
                             G: tl.constexpr, D: tl.constexpr, DP: tl.constexpr, BS: tl.constexpr,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PREC: tl.constexpr):
        tile = tl.program_id(0)
        h = tl.program_id(1)
        row = tl.load(tile_row_ptr + tile)
        start = tl.load(tile_start_ptr + tile)
        n = tl.where(row >= 0, tl.load(tile_len_ptr + tile), 0)
        row = tl.maximum(row, 0)
        m_idx = tl.arange(0, BLOCK_M)
        d = tl.arange(0, DP)
        qmask = m_idx < n
        dmask = d < D
        tok = (start + m_idx).to(tl.int64)
        q = tl.load(q_ptr + tok[:, None] * stride_qn + h * stride_qh + d[None, :],
                    mask=qmask[:, None] & dmask[None, :], other=0.0)
        qpos = tl.load(pos_ptr + tok, mask=qmask, other=0)
        hi = tl.where(n > 0, tl.max(qpos, 0) + 1, 0)      # keys up to the tile's last position
        kvh = h // G
        m = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, DP], tl.float32)
        m, l, acc = _attend_blocks(q, m, l, acc, k_ptr, v_ptr, table_ptr + row * stride_tb, kvh, 0, hi,
                                   qpos, d, dmask, scale, stride_kb, stride_kt, stride_kh,
                                   BS=BS, BLOCK_N=BLOCK_N, CAUSAL=True, PREC=PREC)
        out = acc / l[:, None]
        tl.store(out_ptr + tok[:, None] * stride_on + h * stride_oh + d[None, :],
                 out.to(out_ptr.dtype.element_ty), mask=qmask[:, None] & dmask[None, :])


def paged_varlen_triton(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                        block_tables: torch.Tensor, positions: torch.Tensor,
                        tiles: tuple[torch.Tensor, torch.Tensor, torch.Tensor], scale: float,
                        block_n: int = 64) -> torch.Tensor:
    """Causal attention for any mix of decodes and prefill chunks, straight from the block table.

    Each program takes one query tile (up to TILE_M tokens of one sequence) and one head, and
    streams that sequence's keys up to the tile's last position, masking key > query position.
    Static shapes for a given number of tokens and tiles, so mixed steps can be graph-captured.
    """
    if triton is None:
        raise RuntimeError("paged_varlen_triton needs triton")
    N, H, D = q.shape
    _, bs, n_kv, _ = k_cache.shape
    out = torch.zeros_like(q)        # rows of unused tiles (padding) stay finite
    tile_row, tile_start, tile_len = tiles
    _paged_varlen_kernel[(tile_row.shape[0], H)](
        q, k_cache, v_cache, block_tables, positions, tile_row, tile_start, tile_len, out, scale,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        block_tables.stride(0), out.stride(0), out.stride(1),
        G=H // n_kv, D=D, DP=max(16, triton.next_power_of_2(D)), BS=bs, BLOCK_M=TILE_M,
        BLOCK_N=max(16, block_n), PREC="ieee" if q.dtype == torch.float32 else "tf32")
    return out


def decode_splits(batch: int, n_kv_heads: int, max_context: int, block_n: int = 64,
                  device: torch.device | None = None) -> int:
    """How many slices to cut each context into, so that a decode step fills the GPU.

    One program per (sequence, K/V head) is 192 programs at batch 64 with 3 K/V heads: about one
    per SM, each walking a long context alone. Slicing the context (flash-decoding) gives each SM
    several programs to overlap; the slices are merged afterwards. The count depends only on
    shapes, never on the data, so a captured CUDA graph stays valid."""
    sms = torch.cuda.get_device_properties(device).multi_processor_count if device is not None \
        and device.type == "cuda" else 132
    want = -(-4 * sms // max(1, batch * n_kv_heads))          # about four programs per SM
    return max(1, min(16, want, -(-max_context // block_n)))


def paged_decode_triton(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                        block_tables: torch.Tensor, context_lens: torch.Tensor, scale: float,
                        block_n: int = 64, splits: int | None = None) -> torch.Tensor:
    """Decode attention straight from the block table: q [B, H, D] -> [B, H, D].

    `splits` slices every context (default: `decode_splits`); more than one adds a merge kernel."""
    if triton is None:
        raise RuntimeError("paged_decode_triton needs triton; install it or use the PyTorch path")
    B, H, D = q.shape
    _, bs, n_kv, _ = k_cache.shape
    if k_cache.stride(-1) != 1 or q.stride(-1) != 1:
        raise ValueError("q and the cache must be contiguous in head_dim")
    G = H // n_kv
    block_n = max(block_n, 16)
    if splits is None:
        splits = decode_splits(B, n_kv, block_tables.shape[1] * bs, block_n, q.device)
    out = torch.empty_like(q)
    part = torch.empty((B, H, splits, D), dtype=torch.float32, device=q.device) if splits > 1 else out
    lse = torch.empty((B, H, splits), dtype=torch.float32, device=q.device) if splits > 1 else out
    DP = max(16, triton.next_power_of_2(D))
    _paged_decode_kernel[(B, n_kv, splits)](
        q, k_cache, v_cache, block_tables, context_lens, out, part, lse, scale,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        block_tables.stride(0), out.stride(0), out.stride(1), H,
        G=G, GP=max(16, triton.next_power_of_2(G)), D=D, DP=DP, BS=bs, BLOCK_N=block_n, SPLITS=splits,
        # fp32 caches (tests) get exact fp32 products; half types use the tensor cores
        PREC="ieee" if q.dtype == torch.float32 else "tf32")
    if splits > 1:
        _merge_splits_kernel[(B, H)](part, lse, out, out.stride(0), out.stride(1), H,
                                     SPLITS=splits, SP=triton.next_power_of_2(splits), D=D, DP=DP)
    return out


def _prefill_one(q, k_cache, v_cache, table, positions, ctx, scale):
    """One sequence's chunk of n new tokens (the last n of its ctx tokens)."""
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
    """The engine's paged attention (signature of `kv_cache.PAGED_ATTENTION` entries)."""
    if not isinstance(batch, EngineBatch):
        from ..models.kv_cache import paged_attention_reference
        return paged_attention_reference(q, k_cache, v_cache, batch, scale)
    if batch.tiles is not None:
        return paged_varlen_triton(q.contiguous(), k_cache, v_cache, batch.block_tables, batch.positions,
                                   batch.tiles, scale)
    nd = batch.num_decode
    if nd == q.shape[0] and not batch.prefills:
        return _decode(q, k_cache, v_cache, batch, scale)
    out = torch.empty_like(q)
    if nd:
        out[:nd] = _decode(q[:nd], k_cache, v_cache, batch, scale, nd)
    for row, lo, hi, ctx in batch.prefills:
        out[lo:hi] = _prefill_one(q[lo:hi], k_cache, v_cache, batch.block_tables[row],
                                  batch.positions[lo:hi], ctx, scale)
    return out


def _decode(q, k_cache, v_cache, batch, scale, nd=None):
    tables = batch.block_tables if nd is None else batch.block_tables[:nd]
    if q.is_cuda and triton is not None:
        ctx = batch.context_lens if nd is None else batch.context_lens[:nd]
        return paged_decode_triton(q.contiguous(), k_cache, v_cache, tables, ctx, scale)
    positions = batch.positions if nd is None else batch.positions[:nd]
    return _gather_decode(q, k_cache, v_cache, tables, positions, scale)


register_attention("paged", "engine", engine_attention)
