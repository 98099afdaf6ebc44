"""The online softmax in Triton: the one fold that every Triton attention kernel calls.

Notebook 08 derives it in PyTorch (online_softmax.py); here it is again as a `@triton.jit` helper,
inlined into the flash-attention forward (triton_flash.py, notebook 08) and into the paged decode
and varlen kernels of the engine (paged_triton.py, notebook 06). A kernel computes a tile of raw
scores q k^T and hands it over with its running state; the helper rescales and accumulates.

Two choices are made once, here, for every kernel:
- base 2: `exp2` is a single fast instruction (MUFU.EX2), so the softmax scale arrives with
  log2(e) folded in (`qk_scale = scale * LOG2E`), and m is a running max of base-2 exponents;
- float32 accumulation: scores, l and acc are float32; P is rounded to V's dtype for the tensor
  cores' second matmul.

On a machine without CUDA the kernels run on CPU tensors through Triton's interpreter: importing
this module (or any module that defines kernels) sets TRITON_INTERPRET=1 first.
"""
from __future__ import annotations

import os

from ..device import use_triton_interpreter_without_cuda

use_triton_interpreter_without_cuda()   # before the first @triton.jit below

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

LOG2E = 1.4426950408889634  # exp(x) == exp2(x * log2(e))


def interpreting() -> bool:
    """True when Triton runs kernels through its CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "yes", "on")


@triton.jit
def mma(a, b, acc, DOT_F32: tl.constexpr):
    """acc + a @ b with float32 accumulation on the tensor cores.

    DOT_F32 widens the operands to float32 and asks for exact ("ieee") products. Kernels set it
    for float32 inputs, which must not be rounded to tf32, and under the interpreter, whose bf16
    dot is wrong (it multiplies the raw 16-bit patterns): widening the already-rounded operands
    gives the same products the tensor cores compute.
    """
    if DOT_F32:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    else:
        return tl.dot(a, b, acc)


@triton.jit
def online_softmax_fold(acc, l_i, m_i, qk, keep, v, qk_scale,
                        MASKED: tl.constexpr, DOT_F32: tl.constexpr):
    """Fold one tile of keys into the running (acc, l_i, m_i) of a block of query rows.

    qk: raw scores q k^T [rows, keys] in float32; v: the tile's values [keys, D]; qk_scale: the
    softmax scale times log2(e); keep: bool [rows, keys], where a query may see a key (read only
    when MASKED). m_i is the running max in base-2 units, l_i the running sum of 2^(s - m_i),
    acc the unnormalised output sum P V. Returns the updated (acc, l_i, m_i).

    MASKED=False is the hot loop of the flash kernel: every key is visible to every row, so no
    comparisons are spent, and the scale is applied once to the row max and then in one fused
    multiply-add per score. With MASKED=True, masked scores become -inf before the max. The caller
    guarantees that each row has seen a visible key by the end of its first tile, so m_i is finite
    before any row could meet -inf - (-inf).
    """
    if MASKED:
        qk = tl.where(keep, qk * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        qk = qk - m_new[:, None]
    else:
        m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        qk = qk * qk_scale - m_new[:, None]          # one fused multiply-add per score
    p = tl.math.exp2(qk)
    alpha = tl.math.exp2(m_i - m_new)                # rescale of what was summed so far (<= 1)
    l_i = l_i * alpha + tl.sum(p, 1)
    # running output: acc = acc * alpha + P V, P rounded to the values' dtype for the MMA
    acc = acc * alpha[:, None]
    acc = mma(p.to(v.dtype), v, acc, DOT_F32)
    return acc, l_i, m_new
