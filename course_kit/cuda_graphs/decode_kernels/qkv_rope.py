"""The q/k/v projection with RoPE and the K/V append in its store, in one kernel (notebook 05).

The eager step spends several kernels here: RMSNorm, the fused q/k/v product, a split, cos and
sin, rotate q, rotate k, and two writes into the cache at each row's position. After the product
all of it touches a few KiB, so what it costs is launches. Here it is one `gemv_rows` product
(RMSNorm folded into the load of x, as in gemv.py) whose store does the rest.

RoPE turns the pair (x[i], x[i + D/2]) of each q and k head by position * inv_freq[i]. The pair
lies in two rows of wqkv D/2 apart, so a product that gives each program consecutive rows would
put them in different programs. Each program takes pairs instead (`gemv_rows(PAIR_D=D)`): its
first BLOCK_N/2 rows are the pairs' first elements, the rest the second ones, so its store holds
both halves of every pair it rotates. The weights stay where they are: only the program's row
indices change. Rows of v heads are taken the same way and copied, unrotated.

The rotation is `models.llama.apply_rope`: cos and sin rounded to the model's dtype, each product
rounded, as the eager step does; q goes to `q_out`, k and v into the static cache [B, n_kv, S, D]
at row m, position positions[m].

On the H200 this kernel made llama-1b's step 23 µs shorter than the product followed by a
separate RoPE-and-append kernel (data/reference/h200/logs/decode-probe-1-s8.json). Doing RoPE
inside the attention kernel instead was slower (decode-probe-5-s7.json).
"""
from __future__ import annotations

import torch

from ...device import use_triton_interpreter_without_cuda

use_triton_interpreter_without_cuda()   # before the first @triton.jit below

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from . import gemv as G
from .exchange import Sum
from .gemv import gemv_rows, pair_halves


@triton.jit
def _qkv_rope_kernel(W, X, NORM_W, POS, INV_FREQ, Q_OUT, K_CACHE, V_CACHE, N, K, stride_w, stride_x,
                     stride_qm, stride_cb, stride_ch, stride_cs, eps, stride_xp, READY, EPOCH,
                     H: tl.constexpr, KV: tl.constexpr, D: tl.constexpr,
                     M: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                     PDL: tl.constexpr, X_PARTS: tl.constexpr, SPIN: tl.constexpr):
    DT: tl.constexpr = Q_OUT.dtype.element_ty
    acc, _ = gemv_rows(W, X, NORM_W, N, K, stride_w, stride_x, eps, DT, M, BLOCK_M, BLOCK_N, BLOCK_K, 1, PDL, D,
                       X_PARTS, stride_xp, READY, EPOCH, SPIN)
    rope_append_store(acc, POS, INV_FREQ, Q_OUT, K_CACHE, V_CACHE, N, stride_qm, stride_cb, stride_ch,
                      stride_cs, H, KV, D, M, BLOCK_M, BLOCK_N)


@triton.jit
def rope_append_store(acc, POS, INV_FREQ, Q_OUT, K_CACHE, V_CACHE, N, stride_qm, stride_cb, stride_ch, stride_cs,
                      H: tl.constexpr, KV: tl.constexpr, D: tl.constexpr, M: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """The store of a q/k/v product taken in RoPE pairs (`gemv_rows(PAIR_D=D)`): q rotated into Q_OUT,
    k rotated and v as is into the caches at each row's position. Also the store of the weight-only
    products (woq_gemv.py), whose accumulators come in the same pairs."""
    DT: tl.constexpr = Q_OUT.dtype.element_ty
    HB: tl.constexpr = BLOCK_N // 2
    y = acc.to(DT).to(tl.float32)                  # the product rounded, as F.linear rounds it
    x1, x2 = pair_halves(y, BLOCK_M, BLOCK_N)      # each pair's first and second elements
    pair = tl.program_id(0) * HB + tl.arange(0, HB)
    head = pair // (D // 2)            # 0 .. H-1: q; H .. H+KV-1: k; then v
    i = pair % (D // 2)
    ms = tl.arange(0, BLOCK_M)
    pos = tl.load(POS + ms, mask=ms < M, other=0)
    angle = pos[:, None].to(tl.float32) * tl.load(INV_FREQ + i)[None, :]
    cos = tl.cos(angle).to(DT).to(tl.float32)
    sin = tl.sin(angle).to(DT).to(tl.float32)
    r1 = ((x1 * cos).to(DT).to(tl.float32) - (x2 * sin).to(DT).to(tl.float32)).to(DT)
    r2 = ((x2 * cos).to(DT).to(tl.float32) + (x1 * sin).to(DT).to(tl.float32)).to(DT)
    valid = (ms[:, None] < M) & (pair < N // 2)[None, :]
    is_q = valid & (head < H)[None, :]
    q_at = Q_OUT + ms[:, None] * stride_qm + (head * D + i)[None, :]
    tl.store(q_at, r1, mask=is_q)
    tl.store(q_at + D // 2, r2, mask=is_q)
    slot = ms[:, None] * stride_cb + pos[:, None] * stride_cs
    is_k = valid & ((head >= H) & (head < H + KV))[None, :]
    k_at = K_CACHE + slot + ((head - H) * stride_ch + i)[None, :]
    tl.store(k_at, r1.to(K_CACHE.dtype.element_ty), mask=is_k)
    tl.store(k_at + D // 2, r2.to(K_CACHE.dtype.element_ty), mask=is_k)
    is_v = valid & (head >= H + KV)[None, :]
    v_at = V_CACHE + slot + ((head - H - KV) * stride_ch + i)[None, :]
    tl.store(v_at, x1.to(V_CACHE.dtype.element_ty), mask=is_v)
    tl.store(v_at + D // 2, x2.to(V_CACHE.dtype.element_ty), mask=is_v)


def qkv_rope(wqkv: torch.Tensor, x: torch.Tensor | Sum, norm_weight: torch.Tensor, eps: float, positions: torch.Tensor,
             inv_freq: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, n_heads: int,
             pdl: bool = False, blocks: tuple[int, int] | None = None) -> torch.Tensor:
    """RMSNorm(x) @ wqkv.T, split into q, k, v; returns rotated q [M, H, D] and writes the rotated
    k and v into k_cache / v_cache [>= M, n_kv, S, D] at row m, position positions[m].
    Block shapes: `blocks` when given (BLOCK_N even), else `gemv_blocks`. Under tensor parallelism
    x may be an exchange's `Sum` (gemv.py)."""
    x, x_parts, stride_xp, ready, epoch = G.parts_of(x)
    m = x.shape[0]
    _, n_kv, _, d = k_cache.shape
    n, k = wqkv.shape
    if d % 2:
        raise ValueError(f"RoPE needs an even head_dim, got {d}")
    if n != (n_heads + 2 * n_kv) * d:
        raise ValueError(f"wqkv must have (n_heads + 2 n_kv) * head_dim = {(n_heads + 2 * n_kv) * d} rows, got {n}")
    if x.dim() != 2 or x.shape[1] != k or x.stride(1) != 1 or wqkv.stride(1) != 1:
        raise ValueError(f"x must be a contiguous [M, {k}], got {tuple(x.shape)}")
    if not 1 <= m <= G.MAX_ROWS:
        raise ValueError(f"{m} rows is outside [1, {G.MAX_ROWS}]: a larger batch is a matrix product")
    if k_cache.shape[0] < m or k_cache.stride(-1) != 1 or k_cache.stride() != v_cache.stride():
        raise ValueError(f"the cache must hold {m} rows, be contiguous in head_dim, and K and V alike")
    q = torch.empty(m, n_heads, d, dtype=x.dtype, device=x.device)
    block_n, block_k = blocks or G.gemv_blocks(n, k, G._sm_count(x.device))
    if block_n < 2 or block_n % 2:
        raise ValueError(f"BLOCK_N must be even (a program takes whole pairs), got {block_n}")
    _qkv_rope_kernel[(triton.cdiv(n, block_n),)](
        wqkv, x, norm_weight, positions, inv_freq, q, k_cache, v_cache, n, k, wqkv.stride(0), x.stride(0),
        q.stride(0), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), eps, stride_xp,
        ready if ready is not None else x, epoch if epoch is not None else x,
        H=n_heads, KV=n_kv, D=d, M=m, BLOCK_M=max(2, triton.next_power_of_2(m)), BLOCK_N=block_n, BLOCK_K=block_k,
        PDL=pdl, X_PARTS=x_parts, SPIN=G.SPIN_LIMIT, num_warps=G.NUM_WARPS, **({"launch_pdl": True} if pdl else {}))
    return q
