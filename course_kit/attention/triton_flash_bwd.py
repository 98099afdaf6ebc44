"""Backward pass of the Triton flash attention, and an autograd wrapper.

The forward saved only O and the log-sum-exp L of every query row, never P. The backward
recomputes P block by block from Q, K and L (P = exp(Q Kᵀ·scale - L)) and applies

    dV = Pᵀ dO
    dP = dO Vᵀ
    dS = P ∘ (dP - Δ),   Δ = rowsum(dO ∘ O)      (the softmax Jacobian, row by row)
    dQ = dS K · scale
    dK = dSᵀ Q · scale

Three kernels, no atomics:
* `_bwd_delta_kernel` computes Δ once (one read of O and dO);
* `_bwd_dkdv_kernel`: one program per key block keeps K, V, dK and dV on chip and streams the
  query blocks past them (and, with GQA, every query head that shares the K/V head). It works in
  the transposed orientation, Sᵀ = K Qᵀ, so Pᵀ and dSᵀ come out ready for dV and dK;
* `_bwd_dq_kernel`: one program per query block keeps Q, dO and dQ and streams the key blocks.

What makes them fast is what made the forward fast: the causal diagonal is the only place that
pays for masks (blocks wholly below it run unmasked, blocks above it are skipped); loads of
whole blocks need no bounds checks; and block shapes, warps and pipelining depth are autotuned
per shape. Padded rows need no masks either: a query row past the end loads q = dO = 0 and adds
nothing to dK or dV, and a key row past the end loads k = 0 and adds nothing to dQ.
"""
from __future__ import annotations

import math

import torch

from .. import device as _device
from ..device import use_triton_interpreter_without_cuda

use_triton_interpreter_without_cuda()   # before the first @triton.jit below

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from .triton_flash import flash_attention, seq_bucket  # noqa: E402
from .triton_softmax import LOG2E, interpreting, mma  # noqa: E402


@triton.jit
def _p_and_ds(q, k, v, do, lse2, delta, qk_scale, keep,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr, DOT_F32: tl.constexpr):
    """P and dS for one [BLOCK_M queries x BLOCK_N keys] tile: the backward's arithmetic.

    lse2 is L·log2(e), so P = 2^(Q Kᵀ·qk_scale - lse2) as in the forward; with MASKED, P is zero
    where `keep` is False (above the causal diagonal).
    """
    qk = mma(q, tl.trans(k), tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32), DOT_F32)
    p = tl.math.exp2(qk * qk_scale - lse2[:, None])
    if MASKED:
        p = tl.where(keep, p, 0.0)
    dp = mma(do, tl.trans(v), tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32), DOT_F32)
    ds = p * (dp - delta[:, None])
    return p, ds


@triton.jit
def _bwd_delta_kernel(O, DO, DELTA, seq, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr):
    """Δ = rowsum(dO ∘ O) for one block of rows of one (batch, head); O and dO are contiguous."""
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    bh = tl.program_id(1).to(tl.int64)
    rows = bh * seq * HEAD_DIM + offs_m[:, None] * HEAD_DIM + tl.arange(0, HEAD_DIM)[None, :]
    o = tl.load(O + rows, mask=offs_m[:, None] < seq, other=0.0).to(tl.float32)
    do = tl.load(DO + rows, mask=offs_m[:, None] < seq, other=0.0).to(tl.float32)
    tl.store(DELTA + bh * seq + offs_m, tl.sum(o * do, 1), mask=offs_m < seq)


@triton.jit
def _dkdv_query_blocks(dk, dv, k, v, Q, DO, LSE, DELTA, q_off, row_off, lo, hi, offs_n, stride_qs, seq_q,
                       qk_scale, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                       CAUSAL_MASK: tl.constexpr, BOUNDS: tl.constexpr, DOT_F32: tl.constexpr):
    """Fold query blocks [lo, hi) into one key block's dK and dV (transposed: rows are keys)."""
    offs_d = tl.arange(0, HEAD_DIM)
    for start_m in range(lo, hi, BLOCK_M):
        start_m = tl.multiple_of(start_m, BLOCK_M)
        offs_m = start_m + tl.arange(0, BLOCK_M)
        rows = q_off + offs_m[:, None] * stride_qs + offs_d[None, :]      # Q and dO share strides
        if BOUNDS:
            q = tl.load(Q + rows, mask=offs_m[:, None] < seq_q, other=0.0)
            do = tl.load(DO + rows, mask=offs_m[:, None] < seq_q, other=0.0)
            lse2 = tl.load(LSE + row_off + offs_m, mask=offs_m < seq_q, other=0.0) * 1.4426950408889634
            delta = tl.load(DELTA + row_off + offs_m, mask=offs_m < seq_q, other=0.0)
        else:
            q = tl.load(Q + rows)
            do = tl.load(DO + rows)
            lse2 = tl.load(LSE + row_off + offs_m) * 1.4426950408889634
            delta = tl.load(DELTA + row_off + offs_m)
        # Sᵀ = K Qᵀ: [keys, queries], so Pᵀ and dSᵀ need no transposes before dV and dK
        qkT = mma(k, tl.trans(q), tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32), DOT_F32)
        pT = tl.math.exp2(qkT * qk_scale - lse2[None, :])
        if CAUSAL_MASK:
            pT = tl.where(offs_n[:, None] <= offs_m[None, :], pT, 0.0)
        dv = mma(pT.to(do.dtype), do, dv, DOT_F32)
        dpT = mma(v, tl.trans(do), tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32), DOT_F32)
        dsT = pT * (dpT - delta[None, :])
        dk = mma(dsT.to(q.dtype), q, dk, DOT_F32)
    return dk, dv


@triton.jit
def _bwd_dkdv_kernel(Q, K, V, DO, LSE, DELTA, DK, DV,
                     stride_qb, stride_qh, stride_qs, stride_kb, stride_kh, stride_ks,
                     n_q_heads, n_kv_heads, group, seq_q, seq_k, scale, qk_scale, seq_bucket,
                     HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     CAUSAL: tl.constexpr, DOT_F32: tl.constexpr):
    # (seq_bucket is the autotuner's key, not read here)
    tl.static_assert(BLOCK_N % BLOCK_M == 0)
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
    # Causal (key j visible to query i iff j <= i): queries before start_n never see this block;
    # queries in [start_n, start_n + BLOCK_N) straddle the diagonal; later ones see all of it.
    if CAUSAL:
        diag_end = tl.minimum(start_n + BLOCK_N, seq_q)
        full_lo = start_n + BLOCK_N
    else:
        diag_end = 0
        full_lo = 0
    full_hi = tl.maximum(full_lo, (seq_q // BLOCK_M) * BLOCK_M)       # whole query blocks only
    for g in range(0, group):                      # every query head that shares this K/V head
        off_h = off_kvh * group + g
        q_off = off_b.to(tl.int64) * stride_qb + off_h.to(tl.int64) * stride_qh
        row_off = (off_b * n_q_heads + off_h).to(tl.int64) * seq_q
        if CAUSAL:
            dk, dv = _dkdv_query_blocks(dk, dv, k, v, Q, DO, LSE, DELTA, q_off, row_off, start_n, diag_end,
                                        offs_n, stride_qs, seq_q, qk_scale, HEAD_DIM, BLOCK_M, BLOCK_N,
                                        True, True, DOT_F32)
        dk, dv = _dkdv_query_blocks(dk, dv, k, v, Q, DO, LSE, DELTA, q_off, row_off, full_lo, full_hi,
                                    offs_n, stride_qs, seq_q, qk_scale, HEAD_DIM, BLOCK_M, BLOCK_N,
                                    False, False, DOT_F32)
        dk, dv = _dkdv_query_blocks(dk, dv, k, v, Q, DO, LSE, DELTA, q_off, row_off, full_hi, seq_q,
                                    offs_n, stride_qs, seq_q, qk_scale, HEAD_DIM, BLOCK_M, BLOCK_N,
                                    False, True, DOT_F32)
    out = kv_off + kv_rows   # dK, dV are contiguous like K, V (the wrapper makes sure)
    tl.store(DK + out, (dk * scale).to(DK.dtype.element_ty), mask=offs_n[:, None] < seq_k)
    tl.store(DV + out, dv.to(DV.dtype.element_ty), mask=offs_n[:, None] < seq_k)


@triton.jit
def _dq_key_blocks(dq, q, do, lse2, delta, K, V, kv_off, lo, hi, offs_m, stride_ks, seq_k, qk_scale,
                   HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   CAUSAL_MASK: tl.constexpr, BOUNDS: tl.constexpr, DOT_F32: tl.constexpr):
    """Fold key blocks [lo, hi) into one query block's dQ."""
    offs_d = tl.arange(0, HEAD_DIM)
    for start_n in range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        offs_n = start_n + tl.arange(0, BLOCK_N)
        kv_rows = kv_off + offs_n[:, None] * stride_ks + offs_d[None, :]
        if BOUNDS:
            k = tl.load(K + kv_rows, mask=offs_n[:, None] < seq_k, other=0.0)
            v = tl.load(V + kv_rows, mask=offs_n[:, None] < seq_k, other=0.0)
        else:
            k = tl.load(K + kv_rows)
            v = tl.load(V + kv_rows)
        keep = offs_n[None, :] <= offs_m[:, None]
        p, ds = _p_and_ds(q, k, v, do, lse2, delta, qk_scale, keep, BLOCK_M, BLOCK_N, CAUSAL_MASK, DOT_F32)
        dq = mma(ds.to(k.dtype), k, dq, DOT_F32)
    return dq


@triton.jit
def _bwd_dq_kernel(Q, K, V, DO, LSE, DELTA, DQ,
                   stride_qb, stride_qh, stride_qs, stride_kb, stride_kh, stride_ks,
                   n_q_heads, group, seq_q, seq_k, scale, qk_scale, seq_bucket,
                   HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   CAUSAL: tl.constexpr, DOT_F32: tl.constexpr):
    # (seq_bucket is the autotuner's key, not read here)
    tl.static_assert(BLOCK_M % BLOCK_N == 0)
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
    # keys before start_m are visible to every row of a causal block; [start_m, start_m + BLOCK_M)
    # straddle the diagonal; later keys are invisible
    whole = (seq_k // BLOCK_N) * BLOCK_N
    if CAUSAL:
        full_hi = tl.minimum(start_m, whole)
        end = tl.minimum(start_m + BLOCK_M, seq_k)
    else:
        full_hi = whole
        end = seq_k
    dq = _dq_key_blocks(dq, q, do, lse2, delta, K, V, kv_off, 0, full_hi, offs_m, stride_ks, seq_k, qk_scale,
                        HEAD_DIM, BLOCK_M, BLOCK_N, False, False, DOT_F32)
    dq = _dq_key_blocks(dq, q, do, lse2, delta, K, V, kv_off, full_hi, end, offs_m, stride_ks, seq_k, qk_scale,
                        HEAD_DIM, BLOCK_M, BLOCK_N, CAUSAL, True, DOT_F32)
    tl.store(DQ + q_off + rows, (dq * scale).to(DQ.dtype.element_ty), mask=in_q)


# -- launch configurations -----------------------------------------------------------------------
# dK/dV keeps two [BLOCK_N, D] float32 accumulators on chip and streams narrow query steps
# (BLOCK_M); dQ is the mirror image. Measured on the H200 (data/reference/h200/logs/attn-tune-*-s6.json,
# B4 H16 S4096 D128 causal): small 4-warp dK/dV programs of 64 keys, several per SM, beat one wide
# 8-warp program of 128 keys (373 against 325 TFLOP/s for the whole backward); dQ prefers 128-row
# blocks over 8 warps. 32 x 32 is the fallback for small shared memories.
_DKDV_CONFIGS = [
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 64}, num_warps=4, num_stages=2),
    triton.Config({"BLOCK_M": 32, "BLOCK_N": 64}, num_warps=4, num_stages=3),
    triton.Config({"BLOCK_M": 32, "BLOCK_N": 64}, num_warps=4, num_stages=4),
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 64}, num_warps=4, num_stages=3),
    triton.Config({"BLOCK_M": 32, "BLOCK_N": 32}, num_warps=4, num_stages=2),    # fits a T4 at D=128
]
_DQ_CONFIGS = [
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 64}, num_warps=8, num_stages=3),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 64}, num_warps=8, num_stages=4),
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 64}, num_warps=4, num_stages=2),
    triton.Config({"BLOCK_M": 32, "BLOCK_N": 32}, num_warps=4, num_stages=2),    # fits a T4 at D=128
]
_INTERPRETER = {"dkdv": (16, 32), "dq": (32, 16)}   # (BLOCK_M, BLOCK_N): small and fixed


def _prune_bwd_configs(configs, named_args, **kwargs):
    """GPUs before sm_80 (a T4: 64 KiB of shared memory per SM) keep the blocks of at most 64 (the
    autotuner drops any that still do not fit); newer GPUs skip the 32 x 32 fallback."""
    biggest = [max(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"]) for c in configs]
    if (_device.current_capability() or (0, 0)) >= (8, 0):   # the emulated GPU's under COURSE_KIT_EMULATE
        return [c for c, big in zip(configs, biggest) if big > 32]
    return [c for c, big in zip(configs, biggest) if big <= 64]


_dkdv_tuned = triton.autotune(configs=_DKDV_CONFIGS, key=["seq_bucket", "HEAD_DIM", "CAUSAL"],
                              prune_configs_by={"early_config_prune": _prune_bwd_configs})(_bwd_dkdv_kernel)
_dq_tuned = triton.autotune(configs=_DQ_CONFIGS, key=["seq_bucket", "HEAD_DIM", "CAUSAL"],
                            prune_configs_by={"early_config_prune": _prune_bwd_configs})(_bwd_dq_kernel)


def flash_attention_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                             lse: torch.Tensor, do: torch.Tensor, *, causal: bool = False,
                             scale: float | None = None, configs: dict | None = None,
                             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dQ, dK, dV from the forward's O and LSE and the incoming gradient dO (all [B, H, S, D]).

    configs pins {"dkdv": {...}, "dq": {...}} (BLOCK_M, BLOCK_N, num_warps, num_stages) instead
    of autotuning; the bench's tuning sweep uses it. The interpreter runs small fixed blocks.
    """
    q, k, v, o, do = (t.contiguous() for t in (q, k, v, o, do))
    batch, n_q_heads, seq_q, head_dim = q.shape
    n_kv_heads, seq_k = k.shape[1], k.shape[2]
    group = n_q_heads // n_kv_heads
    scale = 1.0 / math.sqrt(head_dim) if scale is None else float(scale)
    lse = lse.contiguous()
    delta = torch.empty_like(lse)
    _bwd_delta_kernel[(triton.cdiv(seq_q, 64), batch * n_q_heads)](o, do, delta, seq_q, HEAD_DIM=head_dim,
                                                                     BLOCK_M=64)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    interp = interpreting()
    strides = (q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2))
    bucket = seq_bucket(max(seq_q, seq_k))
    flags = dict(HEAD_DIM=head_dim, CAUSAL=causal, DOT_F32=interp)
    dkdv_args = (q, k, v, do, lse, delta, dk, dv, *strides, n_q_heads, n_kv_heads, group, seq_q, seq_k,
                 scale, scale * LOG2E, bucket)
    dq_args = (q, k, v, do, lse, delta, dq, *strides, n_q_heads, group, seq_q, seq_k, scale, scale * LOG2E, bucket)
    if interp:
        configs = {name: {"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": 4, "num_stages": 1}
                   for name, (bm, bn) in _INTERPRETER.items()}
    if configs is not None:
        for kernel, name, args, count, rows in ((_bwd_dkdv_kernel, "dkdv", dkdv_args, batch * n_kv_heads, seq_k),
                                                (_bwd_dq_kernel, "dq", dq_args, batch * n_q_heads, seq_q)):
            c = configs[name]
            step = c["BLOCK_N"] if name == "dkdv" else c["BLOCK_M"]
            kernel[(triton.cdiv(rows, step), count)](*args, **flags, BLOCK_M=c["BLOCK_M"], BLOCK_N=c["BLOCK_N"],
                                                     num_warps=c["num_warps"], num_stages=c["num_stages"])
    else:
        _dkdv_tuned[lambda m: (triton.cdiv(seq_k, m["BLOCK_N"]), batch * n_kv_heads)](*dkdv_args, **flags)
        _dq_tuned[lambda m: (triton.cdiv(seq_q, m["BLOCK_M"]), batch * n_q_heads)](*dq_args, **flags)
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
