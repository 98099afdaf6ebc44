"""Backward pass of the Triton flash attention, and an autograd wrapper (the stretch goal).

The forward saved only O and the log-sum-exp L of every query row, never P. The backward
recomputes P block by block from Q, K and L (P = exp(Q Kᵀ·scale - L)) and applies

    dV = Pᵀ dO
    dP = dO Vᵀ
    dS = P ∘ (dP - Δ),   Δ = rowsum(dO ∘ O)      (the softmax Jacobian, row by row)
    dQ = dS K · scale
    dK = dSᵀ Q · scale

Two kernels avoid atomics: one program per key block accumulates dK and dV over all query
blocks (and, with GQA, over every query head that shares the K/V head); one program per query
block accumulates dQ over the key blocks. Speed is not the point here: fixed tiles, masks on
every load. The forward is the fast path.
"""
from __future__ import annotations

import math

import torch

from .. import device as _device
from . import use_triton_interpreter_without_cuda

use_triton_interpreter_without_cuda()   # before the first @triton.jit below

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from .triton_flash import flash_attention  # noqa: E402
from .triton_softmax import LOG2E, interpreting, mma  # noqa: E402


@triton.jit
def _p_and_ds(q, k, v, do, lse2, delta, offs_m, offs_n, seq_q, seq_k, qk_scale,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, DOT_F32: tl.constexpr):
    """P and dS for one [BLOCK_M queries x BLOCK_N keys] tile, zero outside the valid region."""
    qk = mma(q, tl.trans(k), tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32), DOT_F32)
    valid = (offs_m[:, None] < seq_q) & (offs_n[None, :] < seq_k)
    if CAUSAL:
        valid = valid & (offs_n[None, :] <= offs_m[:, None])
    # base-2 exponent, as in the forward: lse2 = L * log2(e)
    p = tl.where(valid, tl.math.exp2(qk * qk_scale - lse2[:, None]), 0.0)
    dp = mma(do, tl.trans(v), tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32), DOT_F32)
    ds = p * (dp - delta[:, None])
    return p, ds


@triton.jit
def _bwd_dkdv_kernel(Q, K, V, DO, LSE, DELTA, DK, DV,
                     stride_qb, stride_qh, stride_qs, stride_kb, stride_kh, stride_ks,
                     n_q_heads, n_kv_heads, group, seq_q, seq_k, scale, qk_scale,
                     HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     CAUSAL: tl.constexpr, DOT_F32: tl.constexpr):
    start_n = tl.program_id(0) * BLOCK_N
    off_bkv = tl.program_id(1)
    off_b = off_bkv // n_kv_heads
    off_kvh = off_bkv % n_kv_heads
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    kv_off = off_b.to(tl.int64) * stride_kb + off_kvh.to(tl.int64) * stride_kh
    kv_rows = offs_n[:, None] * stride_ks + offs_d[None, :]
    k = tl.load(K + kv_off + kv_rows, mask=offs_n[:, None] < seq_k, other=0.0)
    v = tl.load(V + kv_off + kv_rows, mask=offs_n[:, None] < seq_k, other=0.0)
    dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    # causal: queries before this key block never see it
    lo = (start_n // BLOCK_M) * BLOCK_M if CAUSAL else 0
    for g in range(0, group):                      # every query head that shares this K/V head
        off_h = off_kvh * group + g
        q_off = off_b.to(tl.int64) * stride_qb + off_h.to(tl.int64) * stride_qh   # Q, dO share strides
        row_off = (off_b * n_q_heads + off_h).to(tl.int64) * seq_q
        for start_m in range(lo, seq_q, BLOCK_M):
            offs_m = start_m + tl.arange(0, BLOCK_M)
            rows = offs_m[:, None] * stride_qs + offs_d[None, :]
            in_q = offs_m[:, None] < seq_q
            q = tl.load(Q + q_off + rows, mask=in_q, other=0.0)
            do = tl.load(DO + q_off + rows, mask=in_q, other=0.0)
            lse2 = tl.load(LSE + row_off + offs_m, mask=offs_m < seq_q, other=0.0) * 1.4426950408889634
            delta = tl.load(DELTA + row_off + offs_m, mask=offs_m < seq_q, other=0.0)
            p, ds = _p_and_ds(q, k, v, do, lse2, delta, offs_m, offs_n, seq_q, seq_k, qk_scale,
                              BLOCK_M, BLOCK_N, CAUSAL, DOT_F32)
            dv = mma(tl.trans(p.to(do.dtype)), do, dv, DOT_F32)
            dk = mma(tl.trans(ds.to(q.dtype)), q, dk, DOT_F32)
    out = kv_off + kv_rows   # dK, dV are contiguous like K, V (the wrapper makes sure)
    tl.store(DK + out, (dk * scale).to(DK.dtype.element_ty), mask=offs_n[:, None] < seq_k)
    tl.store(DV + out, dv.to(DV.dtype.element_ty), mask=offs_n[:, None] < seq_k)


@triton.jit
def _bwd_dq_kernel(Q, K, V, DO, LSE, DELTA, DQ,
                   stride_qb, stride_qh, stride_qs, stride_kb, stride_kh, stride_ks,
                   n_q_heads, group, seq_q, seq_k, scale, qk_scale,
                   HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   CAUSAL: tl.constexpr, DOT_F32: tl.constexpr):
    start_m = tl.program_id(0) * BLOCK_M
    off_bh = tl.program_id(1)
    off_b = off_bh // n_q_heads
    off_h = off_bh % n_q_heads
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q_off = off_b.to(tl.int64) * stride_qb + off_h.to(tl.int64) * stride_qh
    kv_off = off_b.to(tl.int64) * stride_kb + (off_h // group).to(tl.int64) * stride_kh
    rows = offs_m[:, None] * stride_qs + offs_d[None, :]
    in_q = offs_m[:, None] < seq_q
    q = tl.load(Q + q_off + rows, mask=in_q, other=0.0)
    do = tl.load(DO + q_off + rows, mask=in_q, other=0.0)
    row_off = off_bh.to(tl.int64) * seq_q
    lse2 = tl.load(LSE + row_off + offs_m, mask=offs_m < seq_q, other=0.0) * 1.4426950408889634
    delta = tl.load(DELTA + row_off + offs_m, mask=offs_m < seq_q, other=0.0)
    dq = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    hi = tl.minimum(seq_k, start_m + BLOCK_M) if CAUSAL else seq_k
    for start_n in range(0, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        kv_rows = offs_n[:, None] * stride_ks + offs_d[None, :]
        k = tl.load(K + kv_off + kv_rows, mask=offs_n[:, None] < seq_k, other=0.0)
        v = tl.load(V + kv_off + kv_rows, mask=offs_n[:, None] < seq_k, other=0.0)
        p, ds = _p_and_ds(q, k, v, do, lse2, delta, offs_m, offs_n, seq_q, seq_k, qk_scale,
                          BLOCK_M, BLOCK_N, CAUSAL, DOT_F32)
        dq = mma(ds.to(k.dtype), k, dq, DOT_F32)
    tl.store(DQ + q_off + rows, (dq * scale).to(DQ.dtype.element_ty), mask=in_q)


def flash_attention_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                             lse: torch.Tensor, do: torch.Tensor, *, causal: bool = False,
                             scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dQ, dK, dV from the forward's O and LSE and the incoming gradient dO (all [B, H, S, D])."""
    q, k, v, o, do = (t.contiguous() for t in (q, k, v, o, do))
    batch, n_q_heads, seq_q, head_dim = q.shape
    n_kv_heads, seq_k = k.shape[1], k.shape[2]
    group = n_q_heads // n_kv_heads
    scale = 1.0 / math.sqrt(head_dim) if scale is None else float(scale)
    delta = (o.float() * do.float()).sum(-1).contiguous()          # Δ = rowsum(dO ∘ O), [B, H, Sq]
    lse = lse.contiguous()
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    interp = interpreting()
    # 64 x 64 tiles; 32 x 32 under the interpreter (faster there) and before sm_80 (a T4 has 64 KiB
    # of shared memory per SM, which the larger tiles of head dim 128 would overflow)
    small = interp or (_device.current_capability() or (0, 0)) < (8, 0)   # the emulated GPU's too
    bm = bn = 32 if small else 64
    warps = 8 if head_dim >= 128 else 4
    common = dict(HEAD_DIM=head_dim, BLOCK_M=bm, BLOCK_N=bn, CAUSAL=causal, DOT_F32=interp,
                  num_warps=warps, num_stages=2)
    strides = (q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2))
    _bwd_dkdv_kernel[(triton.cdiv(seq_k, bn), batch * n_kv_heads)](
        q, k, v, do, lse, delta, dk, dv, *strides, n_q_heads, n_kv_heads, group, seq_q, seq_k,
        scale, scale * LOG2E, **common)
    _bwd_dq_kernel[(triton.cdiv(seq_q, bm), batch * n_q_heads)](
        q, k, v, do, lse, delta, dq, *strides, n_q_heads, group, seq_q, seq_k, scale, scale * LOG2E, **common)
    return dq, dk, dv


class _FlashAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, scale):
        o, lse = flash_attention(q, k, v, causal=causal, scale=scale, return_lse=True)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.causal, ctx.scale = causal, scale
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = flash_attention_backward(q, k, v, o, lse, do, causal=ctx.causal, scale=ctx.scale)
        return dq, dk, dv, None, None


def flash_attention_trainable(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
                              scale: float | None = None) -> torch.Tensor:
    """`flash_attention` with gradients: the Triton forward, then the Triton backward above."""
    return _FlashAttention.apply(q, k, v, causal, scale)
