"""Weight-only int8 and int4 matrix-vector products: the decode step's products on compressed weights.

Issue 48, notebook 01 §7 (and 05). At batch 1 a product reads every weight once and does one
multiply-add with it, so its time is its bytes over the copy rate (gemv.py). Storing the weights in
8 or 4 bits cuts those bytes 2x or ~3.8x, *if* the kernel reads only the codes and forms the weights
in registers. These kernels do: bf16 activations, fp32 accumulation, and never a dequantised copy.

The values are `dtypes/woq.py`'s (the ones torch's peers take); the codes sit in int32 words, a
word's codes being columns far apart ("planes"), so that the activations each code multiplies are
one contiguous run of x (`woq_pack.py`: the packing, and its inverse for the oracle).

Forming a weight costs no int-to-float conversion (which runs at a quarter of the FMA rate and would
cap an int4 kernel below the copy rate): a code moved into the top of a float32 mantissa, with the
exponent bits of 1.0 or-ed in (one mask-and-or), *is* a float: 1 + q/16 at mantissa bits 19-22 and
1 + q/256 at bits 15-18 (int4: one shift places two codes, so four shifts serve a word's eight),
1 + (q + 128)/256 at bits 15-22 (int8, its sign bit flipped by the same instruction). The kernel sums
those floats times x per group, and the group's x (the same for every row, so cheap), and the
scales come in once per group:

    int4:  sum_k w x = scale * sum q x + (zero - 8 scale) * Sx,   sum q x = 16 (S - sum (16 x_lo + x_hi))
    int8:  sum_k q x = 256 Sfx - 384 Sx,  then times the row's scale

Tile shapes, and why (the bf16 product's reasoning, gemv.py, in bytes instead of weights): every SM
gets PROGRAMS_PER_SM programs (the fewest rows per program that does, 2 to 64), and each load brings
up to TILE_BYTES of codes (16 KiB, as the bf16 product's 8192 weights), as many whole groups as fit,
at most a row. A llama-1b q/k/v product in int4 is 3 MiB: 768 programs of 4 rows x 2048 columns,
one 4 KiB load each, several programs resident per SM, all issued before the PDL wait, so that the
reads of the next product overlap the end of this one. The layer's small operations ride along as
in gemv.py (RMSNorm in the load of x, SwiGLU in w13's store, the residual add, the logits' argmax,
RoPE and the K/V append in the q/k/v store), rounded where the eager step rounds.

Checked against the fp32 matmul of the dequantised weights (tests/test_woq_gemv.py, in Triton's
interpreter on a CPU, and on the H200).
"""
from __future__ import annotations

import torch

from ...device import use_triton_interpreter_without_cuda

use_triton_interpreter_without_cuda()   # before the first kernel below

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from . import gemv as G  # noqa: E402
from .gemv import _argmax_store, load_x, pair_halves  # noqa: E402
from .qkv_rope import rope_append_store  # noqa: E402
from .woq_pack import (BITS, FORMATS, INT8_BLOCK, PLANES, QuantWeight, dequantise,  # noqa: E402,F401
                       pack_int4, pack_int8, quantise)

# The exponent bits of 1.0 (int4: or-ed in) and those with bit 22, which flips an int8 code's sign bit
# (int8: xor-ed in). Passed as kernel arguments, so that they sit in a register: a LOP3 instruction
# takes one constant, and a mask with an immediate or-ed with a register is one LOP3, not two.
MAGIC = {"int4": 0x3F800000, "int8": 0x3FC00000}
PROGRAMS_PER_SM = 3       # as the bf16 product (gemv.PROGRAMS_PER_SM); bench woq sweeps these three
TILE_BYTES = 16384        # bytes of codes per load: the bf16 product's 16 KiB. In the sm_90 build
# (woq_hopper.py) an int8 tile takes 128 registers a thread (4 programs of 4 warps an SM, 64 KiB of
# codes in flight), an int4 one 170-220 (2-3 programs, 32-48 KiB in flight); with 8 KiB tiles int4
# takes ~96 (5 programs, 40 KiB). Which keeps the copy rate best is measured, on the whole step.
NUM_WARPS = 4


# ----------------------------------------------------------------------------- the kernels

@triton.jit
def _x_run(X, NORM_W, inv_m, kk, K, stride_x, m, PROLOGUE: tl.constexpr, DT: tl.constexpr):
    """Row m of x at columns kk (one contiguous run per group), in float32, formed as gemv._x_tile
    forms it: the same roundings as the eager step (written out here, not called: Triton's
    interpreter pays for every nested call, a GPU for none)."""
    kmask = kk < K
    if PROLOGUE == 2:    # SWIGLU: x holds [gate; up]
        gate = tl.load(X + m * stride_x + kk, mask=kmask, other=0.0).to(tl.float32)
        up = tl.load(X + m * stride_x + K + kk, mask=kmask, other=0.0).to(tl.float32)
        act = (gate / (1.0 + tl.exp(-gate))).to(DT).to(tl.float32)
        return (act * up).to(DT).to(tl.float32)
    x = tl.load(X + m * stride_x + kk, mask=kmask, other=0.0).to(tl.float32)
    if PROLOGUE == 1:    # NORM: weight * (x / rms(x)), rounded after each step
        nw = tl.load(NORM_W + kk, mask=kmask, other=0.0).to(tl.float32)
        x = ((x * inv_m).to(DT).to(tl.float32) * nw).to(DT).to(tl.float32)
    return x


@triton.jit
def _fold_int4(acc, w, sz, X, NORM_W, inv, col0, K, stride_x, MAGIC, ms, gi, wi, M: tl.constexpr,
               PROLOGUE: tl.constexpr, DT: tl.constexpr, GROUP: tl.constexpr, W_G: tl.constexpr):
    """acc[m, :] += this tile's int4 codes [BLOCK_N, groups, W_G words] times x, for every row m.

    Code p sits at bits 4p..4p+3 of its word. One shift by 15 - 4p (p even) puts codes p and p + 1
    at bits 15-18 and 19-22; or-ed with the exponent bits of 1.0 (MAGIC, passed in a register so
    that mask and or are one LOP3), they are the floats 1 + q/256 and 1 + q/16. Four shifts serve a
    word's eight codes. The first multiplies 16 x (exact), so one accumulator holds
    S = sum 16 (1 + q/256) x + (1 + q/16) x, and per group sum q x = 16 (S - sum (16 x_lo + x_hi))."""
    ks = gi[:, None] * GROUP + wi[None, :]          # each word's plane-0 column, from col0: [groups, W_G]
    scale = (sz << 16).to(tl.float32, bitcast=True)  # bf16 scale (low half) and zero (high half) of a group
    zero = (sz & -65536).to(tl.float32, bitcast=True)
    for m in tl.static_range(M):
        inv_m = tl.sum(tl.where(ms == m, inv, 0.0), 0)
        sfx = tl.zeros(w.shape, tl.float32)
        one = tl.zeros(ks.shape, tl.float32)      # sum of 16 x_lo + x_hi: what the 1s of the floats add
        sx = tl.zeros(ks.shape, tl.float32)       # sum of x
        for j in tl.static_range(4):   # codes 2j (bits 15-18) and 2j + 1 (bits 19-22) after one shift
            if j < 2:
                v = w << (15 - 8 * j)
            else:
                v = w >> (8 * j - 15)     # (arithmetic: the sign copies land above bit 22, masked off)
            xl = 16.0 * _x_run(X, NORM_W, inv_m, col0 + (2 * j) * W_G + ks, K, stride_x, m, PROLOGUE, DT)
            xh = _x_run(X, NORM_W, inv_m, col0 + (2 * j + 1) * W_G + ks, K, stride_x, m, PROLOGUE, DT)
            sfx += ((v & 0x78000) | MAGIC).to(tl.float32, bitcast=True) * xl[None, :, :]
            sfx += ((v & 0x780000) | MAGIC).to(tl.float32, bitcast=True) * xh[None, :, :]
            one += xl + xh
            sx += 0.0625 * xl + xh
        qx = 16.0 * (tl.sum(sfx, 2) - tl.sum(one, 1)[None, :])                   # sum q x per group
        part = tl.sum(scale * qx + (zero - 8.0 * scale) * tl.sum(sx, 1)[None, :], 1)
        acc += tl.where(ms[:, None] == m, part[None, :], 0.0)
    return acc


@triton.jit
def _fold_int8(acc, w, X, NORM_W, inv, col0, K, stride_x, MAGIC, ms, gi, wi, M: tl.constexpr,
               PROLOGUE: tl.constexpr, DT: tl.constexpr, GROUP: tl.constexpr, W_G: tl.constexpr):
    """acc[m, :] += this tile's int8 codes [BLOCK_N, blocks, W_G words] times x, before the row's scale.
    Byte p, shifted to bits 15-22 and xor-ed with MAGIC (the exponent of 1.0 and the byte's sign
    bit, in a register: mask and xor are one LOP3), is the float 1 + (q + 128)/256;
    sum q x = 256 Sfx - 384 Sx."""
    ks = gi[:, None] * GROUP + wi[None, :]
    for m in tl.static_range(M):
        inv_m = tl.sum(tl.where(ms == m, inv, 0.0), 0)
        sfx = tl.zeros(w.shape, tl.float32)
        sx = tl.zeros(ks.shape, tl.float32)
        for p in tl.static_range(4):   # (the shifts are constants of the unrolled loop, written out)
            xp = _x_run(X, NORM_W, inv_m, col0 + p * W_G + ks, K, stride_x, m, PROLOGUE, DT)
            if p < 2:
                f = ((w << (15 - 8 * p)) & 0x7F8000) ^ MAGIC
            else:
                f = ((w >> (8 * p - 15)) & 0x7F8000) ^ MAGIC
            sfx += f.to(tl.float32, bitcast=True) * xp[None, :, :]
            sx += xp
        part = 256.0 * tl.sum(tl.sum(sfx, 2), 1) - 384.0 * tl.sum(tl.sum(sx, 1), 0)
        acc += tl.where(ms[:, None] == m, part[None, :], 0.0)
    return acc


@triton.jit
def woq_rows(WQ, S, X, NORM_W, N, K, stride_w, stride_s, stride_x, eps, MAGIC, DT: tl.constexpr, M: tl.constexpr,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, G_TILE: tl.constexpr, FMT: tl.constexpr,
             GROUP: tl.constexpr, PROLOGUE: tl.constexpr, PDL: tl.constexpr, PAIR_D: tl.constexpr = 0):
    """This program's BLOCK_N rows of prologue(x) @ W.T in float32 [BLOCK_M, BLOCK_N], and the rows:
    gemv.gemv_rows on packed codes (same PAIR_D meaning), G_TILE groups of GROUP columns per load."""
    NPLANES: tl.constexpr = 8 if FMT == 4 else 4
    W_G: tl.constexpr = GROUP // NPLANES
    if PAIR_D > 0:
        HB: tl.constexpr = BLOCK_N // 2
        c = tl.arange(0, BLOCK_N)
        pair = tl.program_id(0) * HB + c % HB
        rows = pair // (PAIR_D // 2) * PAIR_D + pair % (PAIR_D // 2) + (c >= HB).to(tl.int32) * (PAIR_D // 2)
    else:
        rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    rmask = rows < N
    gi = tl.arange(0, G_TILE)
    wi = tl.arange(0, W_G)
    ms = tl.arange(0, BLOCK_M)
    n_groups = tl.cdiv(K, GROUP)
    w_ptrs = WQ + rows[:, None, None].to(tl.int64) * stride_w + gi[None, :, None] * W_G + wi[None, None, :]
    s_ptrs = S + rows[:, None].to(tl.int64) * stride_s + gi[None, :]
    # The first tile: no kernel of this step writes the weights, so they are read before waiting.
    w = tl.load(w_ptrs, mask=rmask[:, None, None] & (gi < n_groups)[None, :, None], other=0)
    sz = tl.zeros([BLOCK_N, G_TILE], tl.int32)
    if FMT == 4:
        sz = tl.load(s_ptrs, mask=rmask[:, None] & (gi < n_groups)[None, :], other=0)
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    inv = tl.zeros([BLOCK_M], tl.float32)
    if PROLOGUE == 1:   # 1/rms of each row of x over all K, in float32 (x is small and in L2)
        kn = tl.arange(0, G_TILE * GROUP)
        for m in tl.static_range(M):
            ss = tl.zeros([G_TILE * GROUP], tl.float32)
            for k0 in range(0, K, G_TILE * GROUP):
                xv = load_x(X, m * stride_x + k0 + kn, k0 + kn < K, 1, 0, DT)
                ss += xv * xv
            inv = tl.where(ms == m, tl.math.rsqrt(tl.sum(ss, 0) / K + eps), inv)
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    if FMT == 4:
        acc = _fold_int4(acc, w, sz, X, NORM_W, inv, 0, K, stride_x, MAGIC, ms, gi, wi, M, PROLOGUE, DT, GROUP, W_G)
    else:
        acc = _fold_int8(acc, w, X, NORM_W, inv, 0, K, stride_x, MAGIC, ms, gi, wi, M, PROLOGUE, DT, GROUP, W_G)
    for g0 in range(G_TILE, n_groups, G_TILE):
        gmask = (g0 + gi) < n_groups
        w = tl.load(w_ptrs + g0 * W_G, mask=rmask[:, None, None] & gmask[None, :, None], other=0)
        if FMT == 4:
            sz = tl.load(s_ptrs + g0, mask=rmask[:, None] & gmask[None, :], other=0)
            acc = _fold_int4(acc, w, sz, X, NORM_W, inv, g0 * GROUP, K, stride_x, MAGIC, ms, gi, wi, M, PROLOGUE,
                             DT, GROUP, W_G)
        else:
            acc = _fold_int8(acc, w, X, NORM_W, inv, g0 * GROUP, K, stride_x, MAGIC, ms, gi, wi, M, PROLOGUE, DT,
                             GROUP, W_G)
    if FMT == 8:   # one scale per output row
        acc *= tl.load(S + rows, mask=rmask, other=0.0)[None, :]
    return acc, rows


@triton.jit
def _woq_gemv_kernel(WQ, S, X, OUT, RES, NORM_W, VALS, IDX, N, K, stride_w, stride_s, stride_x, stride_o, stride_r,
                     eps, stride_v, MAGIC, M: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     G_TILE: tl.constexpr, FMT: tl.constexpr, GROUP: tl.constexpr, PROLOGUE: tl.constexpr,
                     RESIDUAL: tl.constexpr, ARGMAX: tl.constexpr, SWIGLU_OUT: tl.constexpr, PDL: tl.constexpr):
    DT: tl.constexpr = OUT.dtype.element_ty
    ms = tl.arange(0, BLOCK_M)
    if SWIGLU_OUT:   # rows j and j + N/2 (gate and up) in one program; store silu(gate) * up [M, N/2]
        acc, _ = woq_rows(WQ, S, X, NORM_W, N, K, stride_w, stride_s, stride_x, eps, MAGIC, DT, M, BLOCK_M, BLOCK_N,
                          G_TILE, FMT, GROUP, PROLOGUE, PDL, SWIGLU_OUT)
        gate, up = pair_halves(acc.to(DT).to(tl.float32), BLOCK_M, BLOCK_N)   # each rounded, as F.linear
        act = (gate / (1.0 + tl.exp(-gate))).to(DT).to(tl.float32)            # F.silu, rounded
        pair = tl.program_id(0) * (BLOCK_N // 2) + tl.arange(0, BLOCK_N // 2)
        tl.store(OUT + ms[:, None] * stride_o + pair[None, :], (act * up).to(DT),
                 mask=(ms[:, None] < M) & (pair < N // 2)[None, :])
    else:
        acc, rows = woq_rows(WQ, S, X, NORM_W, N, K, stride_w, stride_s, stride_x, eps, MAGIC, DT, M, BLOCK_M, BLOCK_N,
                             G_TILE, FMT, GROUP, PROLOGUE, PDL, 0)
        y = acc.to(DT)                                   # the product rounded, as F.linear rounds it
        omask = (ms[:, None] < M) & (rows < N)[None, :]
        if RESIDUAL:
            r = load_x(RES, ms[:, None] * stride_r + rows[None, :], omask, 1, 0, DT)
            y = (y.to(tl.float32) + r).to(DT)
        tl.store(OUT + ms[:, None] * stride_o + rows[None, :], y, mask=omask)
        if ARGMAX:
            _argmax_store(VALS, IDX, y, omask, ms, M, BLOCK_N, stride_v, 0)


@triton.jit
def _woq_qkv_rope_kernel(WQ, S, X, NORM_W, POS, INV_FREQ, Q_OUT, K_CACHE, V_CACHE, N, K, stride_w, stride_s,
                         stride_x, stride_qm, stride_cb, stride_ch, stride_cs, eps, MAGIC, H: tl.constexpr,
                         KV: tl.constexpr, D: tl.constexpr, M: tl.constexpr, BLOCK_M: tl.constexpr,
                         BLOCK_N: tl.constexpr, G_TILE: tl.constexpr, FMT: tl.constexpr, GROUP: tl.constexpr,
                         PDL: tl.constexpr):
    DT: tl.constexpr = Q_OUT.dtype.element_ty
    acc, _ = woq_rows(WQ, S, X, NORM_W, N, K, stride_w, stride_s, stride_x, eps, MAGIC, DT, M, BLOCK_M, BLOCK_N, G_TILE,
                      FMT, GROUP, 1, PDL, D)
    rope_append_store(acc, POS, INV_FREQ, Q_OUT, K_CACHE, V_CACHE, N, stride_qm, stride_cb, stride_ch, stride_cs,
                      H, KV, D, M, BLOCK_M, BLOCK_N)


# ----------------------------------------------------------------------------- launching them

def woq_blocks(n: int, k: int, fmt: str, group_size: int, sms: int, programs_per_sm: int | None = None,
               tile_bytes: int | None = None) -> tuple[int, int]:
    """(BLOCK_N, groups per load) for an N x K packed weight: the fewest rows per program that still
    give every SM `programs_per_sm` programs (2 to 64 rows, as gemv.gemv_blocks), then as many whole
    groups per load as `tile_bytes` of codes allow (a power of two, at least one, at most the row)."""
    if n < 1 or k < 1:
        raise ValueError(f"weight shape must be positive, got N={n}, K={k}")
    if fmt not in FORMATS:
        raise ValueError(f"weight format must be one of {FORMATS}, got {fmt!r}")
    rows = max(1, n // max(1, sms * (programs_per_sm or PROGRAMS_PER_SM)))
    block_n = min(64, max(2, 1 << (rows.bit_length() - 1)))
    group_bytes = group_size * BITS[fmt] // 8
    fit = max(1, (tile_bytes or TILE_BYTES) // (block_n * group_bytes))
    groups = min(1 << (fit.bit_length() - 1), triton.next_power_of_2(-(-k // group_size)))
    return block_n, groups


def _programs_per_sm(device: torch.device) -> int | None:
    """On a CPU, Triton's interpreter runs each program in Python: one program per "SM"
    (gemv.INTERPRETER_SMS of them), so a product is a few wide programs. On a GPU: PROGRAMS_PER_SM."""
    return None if device.type == "cuda" else 1


def _launch_shape(qw: QuantWeight, x: torch.Tensor, blocks: tuple[int, int] | None) -> tuple[int, int]:
    if qw.fmt not in FORMATS:
        raise ValueError(f"weight format must be one of {FORMATS}, got {qw.fmt!r}")
    block_n, g_tile = blocks or woq_blocks(qw.n, qw.k, qw.fmt, qw.group_size, G._sm_count(x.device),
                                           _programs_per_sm(x.device))
    if g_tile < 1 or g_tile & (g_tile - 1) or block_n < 1 or block_n & (block_n - 1):
        raise ValueError(f"blocks must be two powers of two (BLOCK_N, groups per load), got {(block_n, g_tile)}")
    return block_n, g_tile


def woq_gemv(qw: QuantWeight, x: torch.Tensor, *, prologue: str = "plain", norm_weight: torch.Tensor | None = None,
             eps: float = 1e-5, residual: torch.Tensor | None = None, out: torch.Tensor | None = None,
             pdl: bool = False, blocks: tuple[int, int] | None = None, num_warps: int | None = None,
             argmax_into: tuple[torch.Tensor, torch.Tensor] | None = None, epilogue: str = "plain") -> torch.Tensor:
    """gemv.gemv on a packed weight: x [M, K] (or [M, 2K] for prologue="swiglu") -> [M, N] =
    prologue(x) @ W.T (+ residual), W the dequantised weight. Same options (prologue "plain", "norm",
    "swiglu"; `out` may be `residual`, an in-place update; argmax_into from `argmax_buffers`;
    epilogue="swiglu" for a [gate; up] weight -> [M, N/2]); blocks = (BLOCK_N, groups per load)."""
    if epilogue not in ("plain", "swiglu"):
        raise ValueError(f"epilogue must be 'plain' or 'swiglu', got {epilogue!r}")
    if prologue not in G.PROLOGUES:
        raise ValueError(f"prologue must be one of {sorted(G.PROLOGUES)}, got {prologue!r}")
    swiglu_out = epilogue == "swiglu"
    n, k = qw.shape
    if swiglu_out and (n % 2 or residual is not None or argmax_into is not None):
        raise ValueError(f"epilogue='swiglu' needs an even number of rows (got {n}) and no residual or argmax_into")
    m = x.shape[0]
    want_k = 2 * k if prologue == "swiglu" else k
    if x.dim() != 2 or x.shape[1] != want_k or x.stride(1) != 1:
        raise ValueError(f"x must be a contiguous [M, {want_k}] for a {n} x {k} weight with prologue "
                         f"{prologue!r}, got {tuple(x.shape)}")
    if not 1 <= m <= G.MAX_ROWS:
        raise ValueError(f"{m} rows is outside [1, {G.MAX_ROWS}]: a larger batch is a matrix product")
    if prologue == "norm" and norm_weight is None:
        raise ValueError("prologue='norm' needs norm_weight")
    if out is None:
        out = torch.empty(m, n // 2 if swiglu_out else n, dtype=x.dtype, device=x.device)
    if residual is not None and residual.shape != (m, n):
        raise ValueError(f"residual must be [{m}, {n}], got {tuple(residual.shape)}")
    block_n, g_tile = _launch_shape(qw, x, blocks)
    if swiglu_out and block_n % 2:
        raise ValueError(f"epilogue='swiglu' takes whole (gate, up) pairs: BLOCK_N must be even, got {block_n}")
    programs = triton.cdiv(n, block_n)
    vals, idx = argmax_into if argmax_into is not None else (out, out)
    if argmax_into is not None and (vals.shape != (m, programs) or idx.shape != vals.shape):
        raise ValueError(f"argmax_into must be two [{m}, {programs}] tensors (argmax_buffers), "
                         f"got {tuple(vals.shape)} and {tuple(idx.shape)}")
    res = residual if residual is not None else out
    _woq_gemv_kernel[(programs,)](
        qw.words, qw.scales, x, out, res, norm_weight if norm_weight is not None else x, vals, idx, n, k,
        qw.words.stride(0), qw.scales.stride(0), x.stride(0), out.stride(0), res.stride(0), eps, programs,
        MAGIC[qw.fmt], M=m, BLOCK_M=max(2, triton.next_power_of_2(m)), BLOCK_N=block_n, G_TILE=g_tile, FMT=BITS[qw.fmt],
        GROUP=qw.group_size, PROLOGUE=G.PROLOGUES[prologue], RESIDUAL=residual is not None,
        ARGMAX=argmax_into is not None, SWIGLU_OUT=n if swiglu_out else 0, PDL=pdl,
        num_warps=num_warps or NUM_WARPS, **({"launch_pdl": True} if pdl else {}))
    return out


def woq_qkv_rope(qw: QuantWeight, x: torch.Tensor, norm_weight: torch.Tensor, eps: float, positions: torch.Tensor,
                 inv_freq: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, n_heads: int,
                 pdl: bool = False, blocks: tuple[int, int] | None = None) -> torch.Tensor:
    """qkv_rope.qkv_rope on a packed wqkv: RMSNorm(x) @ W.T, rotated q [M, H, D] returned, rotated k
    and v written into the caches [>= M, n_kv, S, D] at row m, position positions[m]."""
    m = x.shape[0]
    _, n_kv, _, d = k_cache.shape
    n, k = qw.shape
    if d % 2:
        raise ValueError(f"RoPE needs an even head_dim, got {d}")
    if n != (n_heads + 2 * n_kv) * d:
        raise ValueError(f"wqkv must have (n_heads + 2 n_kv) * head_dim = {(n_heads + 2 * n_kv) * d} rows, got {n}")
    if x.dim() != 2 or x.shape[1] != k or x.stride(1) != 1:
        raise ValueError(f"x must be a contiguous [M, {k}], got {tuple(x.shape)}")
    if not 1 <= m <= G.MAX_ROWS:
        raise ValueError(f"{m} rows is outside [1, {G.MAX_ROWS}]: a larger batch is a matrix product")
    if k_cache.shape[0] < m or k_cache.stride(-1) != 1 or k_cache.stride() != v_cache.stride():
        raise ValueError(f"the cache must hold {m} rows, be contiguous in head_dim, and K and V alike")
    block_n, g_tile = _launch_shape(qw, x, blocks)
    if block_n < 2:
        raise ValueError(f"BLOCK_N must be even (a program takes whole pairs), got {block_n}")
    q = torch.empty(m, n_heads, d, dtype=x.dtype, device=x.device)
    _woq_qkv_rope_kernel[(triton.cdiv(n, block_n),)](
        qw.words, qw.scales, x, norm_weight, positions, inv_freq, q, k_cache, v_cache, n, k, qw.words.stride(0),
        qw.scales.stride(0), x.stride(0), q.stride(0), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), eps,
        MAGIC[qw.fmt], H=n_heads, KV=n_kv, D=d, M=m, BLOCK_M=max(2, triton.next_power_of_2(m)), BLOCK_N=block_n, G_TILE=g_tile,
        FMT=BITS[qw.fmt], GROUP=qw.group_size, PDL=pdl, num_warps=NUM_WARPS, **({"launch_pdl": True} if pdl else {}))
    return q


def argmax_buffers(qw: QuantWeight, m: int,
                   device: torch.device | str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Buffers for `woq_gemv(qw, x [m, K], argmax_into=...)` with the default block shapes."""
    dev = torch.device(device) if device is not None else qw.words.device
    blocks = triton.cdiv(qw.n, woq_blocks(qw.n, qw.k, qw.fmt, qw.group_size, G._sm_count(dev),
                                          _programs_per_sm(dev))[0])
    return (torch.empty(m, blocks, dtype=torch.float32, device=dev),
            torch.empty(m, blocks, dtype=torch.int32, device=dev))
