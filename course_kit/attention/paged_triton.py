"""Triton kernels that read the paged KV cache straight from the block table (notebook 06's engine).

- `paged_decode_triton`: one query per sequence. One program per (sequence, K/V head, slice of
  the context): the G query heads that share a K/V head are processed together, so each K/V tile
  is loaded once for G queries. With more than one slice (flash-decoding, `decode_splits`), a
  second kernel merges the slices by their log-sum-exp.
- `paged_varlen_triton`: any mix of decodes and prefill chunks. One program per (query tile of
  at most TILE_M tokens of one sequence, head), streaming that sequence's keys up to the tile's
  last position with a causal mask.

Both walk the keys with `_paged_attend_blocks` and fold them with the same online softmax as the
flash-attention kernel (triton_softmax.online_softmax_fold, base 2). Both have static shapes for a
given number of rows and tiles, and never sync with the host, so a step can be captured in a CUDA
graph. Importing this module without CUDA sets TRITON_INTERPRET=1 (tests run the kernels on CPU).
"""
from __future__ import annotations

import torch

from ..device import use_triton_interpreter_without_cuda

use_triton_interpreter_without_cuda()   # before the first @triton.jit below

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from .paged import TILE_M  # noqa: E402
from .triton_softmax import LOG2E, interpreting, mma, online_softmax_fold  # noqa: E402
from ..device import multiprocessors


@triton.jit
def _paged_attend_blocks(q, acc, l, m, k_ptr, v_ptr, table_row_ptr, kvh, lo, hi, qpos, d, dmask, qk_scale,
                         stride_kb, stride_kt, stride_kh, BS: tl.constexpr, BLOCK_N: tl.constexpr,
                         CAUSAL: tl.constexpr, DOT_F32: tl.constexpr):
    """The online softmax of notebook 08 over keys [lo, hi) of one sequence, read through its
    block table row: key t lives in block table[t // BS] at offset t % BS. Returns the updated
    (acc, l, m). CAUSAL masks key positions after each query's `qpos`."""
    for start in range(lo, hi, BLOCK_N):
        t = start + tl.arange(0, BLOCK_N)
        tmask = t < hi
        block = tl.load(table_row_ptr + t // BS, mask=tmask, other=0).to(tl.int64)
        base = block * stride_kb + (t % BS) * stride_kt + kvh * stride_kh
        kv_mask = tmask[:, None] & dmask[None, :]
        k = tl.load(k_ptr + base[:, None] + d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(v_ptr + base[:, None] + d[None, :], mask=kv_mask, other=0.0)
        qk = mma(q, tl.trans(k), None, DOT_F32)                     # [rows, BLOCK_N] float32
        if CAUSAL:
            keep = (t[None, :] <= qpos[:, None]) & tmask[None, :]
        else:
            keep = tmask[None, :]
        # every row sees key `lo` in the first tile (decode: lo < hi; varlen: key 0 <= qpos), so
        # m is finite before any masked score meets it
        acc, l, m = online_softmax_fold(acc, l, m, qk, keep, v, qk_scale, True, DOT_F32)
    return acc, l, m


@triton.jit
def _paged_decode_kernel(q_ptr, k_ptr, v_ptr, table_ptr, ctx_ptr, out_ptr, part_ptr, lse_ptr, qk_scale,
                         stride_qn, stride_qh, stride_kb, stride_kt, stride_kh, stride_tb,
                         stride_on, stride_oh, H,
                         G: tl.constexpr, GP: tl.constexpr, D: tl.constexpr, DP: tl.constexpr,
                         BS: tl.constexpr, BLOCK_N: tl.constexpr, SPLITS: tl.constexpr,
                         DOT_F32: tl.constexpr, PDL: tl.constexpr, CTX_OFFSET: tl.constexpr):
    # one program: one sequence, one K/V head (all G query heads that share it, so each K/V
    # tile is loaded once for G queries), one of SPLITS slices of the context
    if PDL:   # programmatic dependent launch (notebook 05's decode step): let the next kernel
        tl.extra.cuda.gdc_launch_dependents()   # launch, and wait for q and the new K/V
        tl.extra.cuda.gdc_wait()
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
    ctx = tl.load(ctx_ptr + seq) + CTX_OFFSET
    chunk = tl.cdiv(tl.cdiv(ctx, SPLITS), BLOCK_N) * BLOCK_N     # whole tiles per slice
    lo = split * chunk
    hi = tl.minimum(ctx, lo + chunk)
    m = tl.full([GP], float("-inf"), tl.float32)
    l = tl.zeros([GP], tl.float32)
    acc = tl.zeros([GP, DP], tl.float32)
    acc, l, m = _paged_attend_blocks(q, acc, l, m, k_ptr, v_ptr, table_ptr + seq * stride_tb, kvh, lo, hi,
                                     hi, d, dmask, qk_scale, stride_kb, stride_kt, stride_kh,
                                     BS=BS, BLOCK_N=BLOCK_N, CAUSAL=False, DOT_F32=DOT_F32)
    omask = gmask[:, None] & dmask[None, :]
    if SPLITS == 1:
        out = acc / l[:, None]
        tl.store(out_ptr + seq * stride_on + heads[:, None] * stride_oh + d[None, :],
                 out.to(out_ptr.dtype.element_ty), mask=omask)
    else:
        # this slice's softmax-weighted mean and its log-sum-exp (base 2, as m); an empty slice
        # (a short context) has lse = -inf and weighs nothing when the slices are merged
        l_safe = tl.where(l > 0, l, 1.0)
        lse = tl.where(l > 0, m + tl.math.log2(l_safe), float("-inf"))
        row = (seq * H + heads) * SPLITS + split
        tl.store(part_ptr + row[:, None] * D + d[None, :], acc / l_safe[:, None], mask=omask)
        tl.store(lse_ptr + row, lse, mask=gmask)


@triton.jit
def _merge_splits_kernel(part_ptr, lse_ptr, out_ptr, stride_on, stride_oh, H,
                         SPLITS: tl.constexpr, SP: tl.constexpr, D: tl.constexpr, DP: tl.constexpr,
                         PDL: tl.constexpr):
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    # the slices' means weighted by their share of the softmax sum, 2^(lse - max lse): the same
    # rescaling as the online softmax, done once over the SPLITS partial results
    seq = tl.program_id(0)
    h = tl.program_id(1)
    sp = tl.arange(0, SP)
    d = tl.arange(0, DP)
    smask = sp < SPLITS
    rows = (seq * H + h) * SPLITS + sp
    lse = tl.load(lse_ptr + rows, mask=smask, other=float("-inf"))
    w = tl.math.exp2(lse - tl.max(lse, 0))
    o = tl.load(part_ptr + rows[:, None] * D + d[None, :], mask=smask[:, None] & (d < D)[None, :], other=0.0)
    out = tl.sum(o * w[:, None], 0) / tl.sum(w, 0)
    tl.store(out_ptr + seq * stride_on + h * stride_oh + d, out.to(out_ptr.dtype.element_ty), mask=d < D)


@triton.jit
def _paged_varlen_kernel(q_ptr, k_ptr, v_ptr, table_ptr, pos_ptr, tile_row_ptr, tile_start_ptr,
                         tile_len_ptr, out_ptr, qk_scale,
                         stride_qn, stride_qh, stride_kb, stride_kt, stride_kh, stride_tb,
                         stride_on, stride_oh,
                         G: tl.constexpr, D: tl.constexpr, DP: tl.constexpr, BS: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DOT_F32: tl.constexpr):
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
    acc, l, m = _paged_attend_blocks(q, acc, l, m, k_ptr, v_ptr, table_ptr + row * stride_tb, kvh, 0, hi,
                                     qpos, d, dmask, qk_scale, stride_kb, stride_kt, stride_kh,
                                     BS=BS, BLOCK_N=BLOCK_N, CAUSAL=True, DOT_F32=DOT_F32)
    out = acc / l[:, None]
    tl.store(out_ptr + tok[:, None] * stride_on + h * stride_oh + d[None, :],
             out.to(out_ptr.dtype.element_ty), mask=qmask[:, None] & dmask[None, :])


def _dot_f32(q: torch.Tensor) -> bool:
    """float32 caches (tests) get exact float32 products; half types use the tensor cores, except
    under the interpreter, whose half-precision dot is wrong (see triton_softmax.mma)."""
    return q.dtype == torch.float32 or interpreting()


def paged_varlen_triton(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                        block_tables: torch.Tensor, positions: torch.Tensor,
                        tiles: tuple[torch.Tensor, torch.Tensor, torch.Tensor], scale: float,
                        block_n: int = 64) -> torch.Tensor:
    """Causal attention for any mix of decodes and prefill chunks, straight from the block table.

    Each program takes one query tile (up to TILE_M tokens of one sequence) and one head, and
    streams that sequence's keys up to the tile's last position, masking key > query position.
    Static shapes for a given number of tokens and tiles, so mixed steps can be graph-captured.
    """
    N, H, D = q.shape
    _, bs, n_kv, _ = k_cache.shape
    out = torch.zeros_like(q)        # rows of unused tiles (padding) stay finite
    tile_row, tile_start, tile_len = tiles
    _paged_varlen_kernel[(tile_row.shape[0], H)](
        q, k_cache, v_cache, block_tables, positions, tile_row, tile_start, tile_len, out, scale * LOG2E,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        block_tables.stride(0), out.stride(0), out.stride(1),
        G=H // n_kv, D=D, DP=max(16, triton.next_power_of_2(D)), BS=bs, BLOCK_M=TILE_M,
        BLOCK_N=max(16, block_n), DOT_F32=_dot_f32(q))
    return out


def decode_splits(batch: int, n_kv_heads: int, max_context: int, block_n: int = 64,
                  device: torch.device | None = None) -> int:
    """How many slices to cut each context into, so that a decode step fills the GPU.

    One program per (sequence, K/V head) is 192 programs at batch 64 with 3 K/V heads: about one
    per SM, each walking a long context alone. Slicing the context (flash-decoding) gives each SM
    several programs to overlap; the slices are merged afterwards. The count depends only on
    shapes, never on the data, so a captured CUDA graph stays valid."""
    sms = multiprocessors(device) if device is not None \
        and device.type == "cuda" else 132
    want = -(-4 * sms // max(1, batch * n_kv_heads))          # about four programs per SM
    return max(1, min(16, want, -(-max_context // block_n)))


def paged_decode_triton(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                        block_tables: torch.Tensor, context_lens: torch.Tensor, scale: float,
                        block_n: int = 64, splits: int | None = None, pdl: bool = False,
                        context_offset: int = 0) -> torch.Tensor:
    """Decode attention straight from the block table: q [B, H, D] -> [B, H, D].

    Row b attends to its first context_lens[b] + context_offset keys (notebook 05's step passes
    its positions and 1, which saves a kernel). `splits` slices every context (default:
    `decode_splits`); more than one adds a merge kernel. pdl: launch both with programmatic
    dependent launch (Hopper; notebook 05's decode step)."""
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
    launch = {"launch_pdl": True} if pdl else {}
    _paged_decode_kernel[(B, n_kv, splits)](
        q, k_cache, v_cache, block_tables, context_lens, out, part, lse, scale * LOG2E,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        block_tables.stride(0), out.stride(0), out.stride(1), H,
        G=G, GP=max(16, triton.next_power_of_2(G)), D=D, DP=DP, BS=bs, BLOCK_N=block_n, SPLITS=splits,
        DOT_F32=_dot_f32(q), PDL=pdl, CTX_OFFSET=context_offset, **launch)
    if splits > 1:
        _merge_splits_kernel[(B, H)](part, lse, out, out.stride(0), out.stride(1), H,
                                     SPLITS=splits, SP=triton.next_power_of_2(splits), D=D, DP=DP, PDL=pdl,
                                     **launch)
    return out
