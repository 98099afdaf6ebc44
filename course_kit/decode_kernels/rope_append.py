"""RoPE on the new q and k, and the K/V append, in one kernel (notebook 05).

The eager step spends several kernels here: split the fused q/k/v projection, compute cos and
sin, rotate q, rotate k, write k and v into the cache at each row's position. All of it reads
and writes a few KiB, so what it costs is launches. One program per (row, head) does it all:
a query head rotates its slice of q into `q_out`; a K/V head rotates k and copies v into the
static cache [B, n_kv, S, D] at the row's position.

The rotation is `models.llama.apply_rope`: pairs (x[i], x[i + D/2]) turned by position * inv_freq[i],
with cos and sin rounded to the model's dtype and each product rounded, as the eager step does.
(Doing this inside the attention kernel instead, one kernel fewer a layer, was slower on the H200:
data/reference/h200/logs/decode-probe-5-s7.json.)
"""
from __future__ import annotations

import torch

from ..attention import use_triton_interpreter_without_cuda

use_triton_interpreter_without_cuda()   # before the first @triton.jit below

import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def _rope_append_kernel(QKV, POS, INV_FREQ, Q_OUT, K_CACHE, V_CACHE, stride_qkv, stride_qm, stride_qh,
                        stride_cb, stride_ch, stride_cs,
                        H: tl.constexpr, KV: tl.constexpr, D: tl.constexpr, HALF_P: tl.constexpr,
                        PDL: tl.constexpr):
    if PDL:   # let the attention kernel launch; wait for the q/k/v projection to finish
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    m = tl.program_id(0)
    head = tl.program_id(1)          # 0 .. H-1: a query head; H .. H+KV-1: a K/V head
    DT: tl.constexpr = Q_OUT.dtype.element_ty
    half: tl.constexpr = D // 2
    i = tl.arange(0, HALF_P)
    imask = i < half
    pos = tl.load(POS + m)
    angle = pos.to(tl.float32) * tl.load(INV_FREQ + i, mask=imask, other=0.0)
    cos = tl.cos(angle).to(DT).to(tl.float32)
    sin = tl.sin(angle).to(DT).to(tl.float32)
    src = QKV + m * stride_qkv + head * D
    x1 = tl.load(src + i, mask=imask, other=0.0).to(tl.float32)
    x2 = tl.load(src + half + i, mask=imask, other=0.0).to(tl.float32)
    r1 = ((x1 * cos).to(DT).to(tl.float32) - (x2 * sin).to(DT).to(tl.float32)).to(DT)
    r2 = ((x2 * cos).to(DT).to(tl.float32) + (x1 * sin).to(DT).to(tl.float32)).to(DT)
    if head < H:
        dst = Q_OUT + m * stride_qm + head * stride_qh
        tl.store(dst + i, r1, mask=imask)
        tl.store(dst + half + i, r2, mask=imask)
    else:
        kvh = head - H
        at = m * stride_cb + kvh * stride_ch + pos * stride_cs
        tl.store(K_CACHE + at + i, r1.to(K_CACHE.dtype.element_ty), mask=imask)
        tl.store(K_CACHE + at + half + i, r2.to(K_CACHE.dtype.element_ty), mask=imask)
        v_src = QKV + m * stride_qkv + (H + KV + kvh) * D
        tl.store(V_CACHE + at + i, tl.load(v_src + i, mask=imask), mask=imask)
        tl.store(V_CACHE + at + half + i, tl.load(v_src + half + i, mask=imask), mask=imask)


def rope_append(qkv: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor, k_cache: torch.Tensor,
                v_cache: torch.Tensor, n_heads: int, q_out: torch.Tensor | None = None,
                pdl: bool = False) -> torch.Tensor:
    """qkv [M, (H + 2 n_kv) D] from the fused projection -> rotated q [M, H, D]; the rotated k and
    v are written into k_cache / v_cache [>= M, n_kv, S, D] at row m, position positions[m]."""
    m = qkv.shape[0]
    _, n_kv, seq, d = k_cache.shape
    if d % 2:
        raise ValueError(f"RoPE needs an even head_dim, got {d}")
    if qkv.dim() != 2 or qkv.shape[1] != (n_heads + 2 * n_kv) * d or qkv.stride(1) != 1:
        raise ValueError(f"qkv must be a contiguous [M, {(n_heads + 2 * n_kv) * d}], got {tuple(qkv.shape)}")
    if k_cache.shape[0] < m or k_cache.stride(-1) != 1 or k_cache.stride() != v_cache.stride():
        raise ValueError(f"the cache must hold {m} rows, be contiguous in head_dim, and K and V alike")
    q_out = torch.empty(m, n_heads, d, dtype=qkv.dtype, device=qkv.device) if q_out is None else q_out
    _rope_append_kernel[(m, n_heads + n_kv)](
        qkv, positions, inv_freq, q_out, k_cache, v_cache, qkv.stride(0), q_out.stride(0), q_out.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        H=n_heads, KV=n_kv, D=d, HALF_P=triton.next_power_of_2(d // 2), PDL=pdl, num_warps=1,
        **({"launch_pdl": True} if pdl else {}))
    return q_out
