"""Matrix-vector products that stream weights at the copy rate, with the layer's small ops folded in.

Notebook 05. y[m, n] = sum_k W[n, k] * x[m, k] for a handful of rows m (the batch, at most
MAX_ROWS). Why not cuBLAS? Alone, a product runs at about the same speed either way (the H200
sweep in data/reference/h200/logs/decode-probe-1-s7.json: faster on some shapes, slower on one).
What a kernel of our own adds is room for the layer's small operations, and a launch that
overlaps its neighbours (PDL, below). At batch 1 a product is a pure read of W; what decides its
speed is how many bytes each SM keeps in flight and how long the kernel's start and tail leave
the memory idle. So each program owns BLOCK_N rows of W and walks K in tiles of BLOCK_N x BLOCK_K, wide enough
(16 KiB of bf16) that one load keeps an SM's memory pipe busy; there are enough programs to give
every SM PROGRAMS_PER_SM (`gemv_blocks`). No split-K, so no atomics and no reduction kernel: the sums are the
same every run.

The small operations of a layer ride along, each where its data already is:
- PROLOGUE=NORM:   x is the residual stream; each program computes x's RMS (K values, from L2)
                   and normalises x as it loads it, so RMSNorm costs no kernel;
- PROLOGUE=SWIGLU: x is [gate; up] from the previous product; silu(gate) * up is formed on load
                   (each program forms every activation it reads: the step uses SWIGLU_OUT);
- RESIDUAL:        y += r in the store (r may be the output itself: the residual stream is updated
                   in place, each element read and written by the one program that owns it);
- ARGMAX:          the store also keeps each row's largest value among the program's BLOCK_N
                   and its index (the logits' first half of greedy decoding, argmax.py);
- SWIGLU_OUT:      W is [gate; up] (w13): each program takes matching gate and up rows (pairs j,
                   j + N/2) and stores silu(gate) * up, so the next product (w2) loads a plain x.
Every rounding to the model's dtype happens where the eager step rounds (after the norm, after
silu, after each product), so bf16 results track the eager step's.

PDL (programmatic dependent launch, Hopper): the kernel reads its first weight tile, which no
earlier kernel writes, then lets the next kernel launch and waits for the previous one to finish.
Weight reads then overlap the previous kernel's tail instead of following it.
"""
from __future__ import annotations

from typing import Any

import torch

from ...device import use_triton_interpreter_without_cuda

use_triton_interpreter_without_cuda()   # before the first kernel below

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from .exchange import (SPIN_LIMIT, Push, Sum, push_rows, signal_ranks, wait_for_ranks)
from ...device import multiprocessors

HAS_PDL = hasattr(getattr(getattr(tl, "extra", None), "cuda", None), "gdc_wait")   # Triton >= 3.4
MAX_ROWS = 8                 # a batch above this is a matrix product: cuBLAS's job, not a GEMV's
PLAIN, NORM, SWIGLU = 0, 1, 2
PROLOGUES = {"plain": PLAIN, "norm": NORM, "swiglu": SWIGLU}
PROGRAMS_PER_SM = 3          # chosen on the H200, inside the whole step with PDL (logs under
TILE = 8192                  # data/reference/h200/logs/decode-probe-*-s[78].json): 3 programs an SM,
NUM_WARPS = 4                # tiles of 8192 weights (16 KiB of bf16) per load, 4 warps
# Two ways to keep more bytes in flight made llama-1b's step slower on the H200 and are not here:
# loading tile k+1 before folding tile k (1.11 ms against 0.86), and prefetching the next tiles
# into L2 before the PDL wait (0.92-1.02 ms); decode-probe-1-s8.json, code in its commit 79cff77.


def gemv_blocks(n: int, k: int, sms: int, programs_per_sm: int | None = None,
                tile: int | None = None) -> tuple[int, int]:
    """(BLOCK_N, BLOCK_K) for an N x K weight: the fewest rows per program that still give every
    SM `programs_per_sm` programs (2 to 64 rows), then as much of K per load as `tile` weights
    allow (at least 128 columns, at most the row). Defaults: PROGRAMS_PER_SM and TILE."""
    if n < 1 or k < 1:
        raise ValueError(f"weight shape must be positive, got N={n}, K={k}")
    rows = max(1, n // max(1, sms * (programs_per_sm or PROGRAMS_PER_SM)))
    block_n = min(64, max(2, 1 << (rows.bit_length() - 1)))          # a power of two, <= rows
    block_k = min(triton.next_power_of_2(k), max(128, (tile or TILE) // block_n))
    return block_n, block_k


@triton.jit
def load_x(X, at, mask, PARTS: tl.constexpr, stride_p, DT: tl.constexpr):
    """x at `at`, in float32; with PARTS > 1, x is the sum of PARTS partial vectors stride_p apart
    (the ranks' slots of a folded TP exchange, exchange.py), summed in rank order and rounded to
    the model's dtype as the all-reduce it replaces rounds."""
    x = tl.load(X + at, mask=mask, other=0.0).to(tl.float32)
    if PARTS > 1:
        for p in tl.static_range(1, PARTS):
            x += tl.load(X + p * stride_p + at, mask=mask, other=0.0).to(tl.float32)
        x = x.to(DT).to(tl.float32)
    return x


@triton.jit
def _x_tile(X, NORM_W, inv_rms, k0, K, stride_x, m, ks, PROLOGUE: tl.constexpr, DT: tl.constexpr,
            X_PARTS: tl.constexpr, stride_xp):
    """Row m of the product's input, columns k0 + ks, in float32, formed as the eager step forms it."""
    kk = k0 + ks
    kmask = kk < K
    if PROLOGUE == 2:    # SWIGLU: x holds [gate; up], K = ffn_dim
        gate = tl.load(X + m * stride_x + kk, mask=kmask, other=0.0).to(tl.float32)
        up = tl.load(X + m * stride_x + K + kk, mask=kmask, other=0.0).to(tl.float32)
        act = (gate / (1.0 + tl.exp(-gate))).to(DT).to(tl.float32)
        return (act * up).to(DT).to(tl.float32)
    x = load_x(X, m * stride_x + kk, kmask, X_PARTS, stride_xp, DT)
    if PROLOGUE == 1:    # NORM: weight * (x / rms(x)), rounded after each step as RMSNorm does
        nw = tl.load(NORM_W + kk, mask=kmask, other=0.0).to(tl.float32)
        x = ((x * inv_rms).to(DT).to(tl.float32) * nw).to(DT).to(tl.float32)
    return x


@triton.jit
def _fold_tile(acc, w, X, NORM_W, inv, k0, K, stride_x, ms, ks,
               M: tl.constexpr, PROLOGUE: tl.constexpr, DT: tl.constexpr, X_PARTS: tl.constexpr, stride_xp):
    """acc[m, :] += W_tile @ x[m, tile] for every row m: the weight tile is read once for all rows."""
    wf = w.to(tl.float32)
    for m in tl.static_range(M):
        inv_m = tl.sum(tl.where(ms == m, inv, 0.0), 0)
        x = _x_tile(X, NORM_W, inv_m, k0, K, stride_x, m, ks, PROLOGUE, DT, X_PARTS, stride_xp)
        part = tl.sum(wf * x[None, :], 1)
        acc += tl.where(ms[:, None] == m, part[None, :], 0.0)
    return acc


@triton.jit
def gemv_rows(W, X, NORM_W, N, K, stride_w, stride_x, eps, DT: tl.constexpr, M: tl.constexpr,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PROLOGUE: tl.constexpr,
              PDL: tl.constexpr, PAIR_D: tl.constexpr = 0, X_PARTS: tl.constexpr = 1, stride_xp=0,
              READY=None, EPOCH=None, SPIN: tl.constexpr = 0):
    """This program's BLOCK_N rows of prologue(x) @ W.T, in float32 [BLOCK_M, BLOCK_N], and the
    row indices; what to do with them (the store) is the calling kernel's.

    PAIR_D > 0: W's rows are groups of PAIR_D rows, and the program takes BLOCK_N / 2 pairs
    (i, i + PAIR_D / 2) of them: columns [0, BLOCK_N / 2) are the pairs' first rows, the rest their
    second rows (`pair_halves` splits them). RoPE's pairs are a head's (PAIR_D = head_dim,
    qkv_rope.py), SwiGLU's a gate row and its up row (PAIR_D = N). Otherwise BLOCK_N consecutive rows.

    X_PARTS > 1: x is the sum of the ranks' slots of a TP exchange (`load_x`); the program waits
    for the exchange's flag READY (exchange.wait_for_ranks) before reading them."""
    if PAIR_D > 0:
        HB: tl.constexpr = BLOCK_N // 2
        c = tl.arange(0, BLOCK_N)
        pair = tl.program_id(0) * HB + c % HB
        rows = pair // (PAIR_D // 2) * PAIR_D + pair % (PAIR_D // 2) + (c >= HB).to(tl.int32) * (PAIR_D // 2)
    else:
        rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    rmask = rows < N
    ks = tl.arange(0, BLOCK_K)
    ms = tl.arange(0, BLOCK_M)
    w_ptrs = W + rows[:, None].to(tl.int64) * stride_w + ks[None, :]
    # The first tile of W: no kernel of this step writes W, so it is read before waiting.
    w = tl.load(w_ptrs, mask=rmask[:, None] & (ks[None, :] < K), other=0.0)
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()   # the next kernel may start reading its weights
        tl.extra.cuda.gdc_wait()                # x (the previous kernel's output) is now complete
    if X_PARTS > 1:
        wait_for_ranks(READY, EPOCH, X_PARTS, SPIN)   # ... and so is every other rank's part of it
    inv = tl.zeros([BLOCK_M], tl.float32)
    if PROLOGUE == 1:   # 1/rms of each row of x, in float32 over all K (x is small and in L2)
        for m in tl.static_range(M):
            ss = tl.zeros([BLOCK_K], tl.float32)
            for k0 in range(0, K, BLOCK_K):
                xv = load_x(X, m * stride_x + k0 + ks, k0 + ks < K, X_PARTS, stride_xp, DT)
                ss += xv * xv
            inv = tl.where(ms == m, tl.math.rsqrt(tl.sum(ss, 0) / K + eps), inv)
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    acc = _fold_tile(acc, w, X, NORM_W, inv, 0, K, stride_x, ms, ks, M, PROLOGUE, DT, X_PARTS, stride_xp)
    for k0 in range(BLOCK_K, K, BLOCK_K):
        w = tl.load(w_ptrs + k0, mask=rmask[:, None] & (k0 + ks[None, :] < K), other=0.0)
        acc = _fold_tile(acc, w, X, NORM_W, inv, k0, K, stride_x, ms, ks, M, PROLOGUE, DT, X_PARTS, stride_xp)
    return acc, rows


@triton.jit
def pair_halves(y, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """[BLOCK_M, BLOCK_N] of pairs (gemv_rows with PAIR_D) -> the first and the second rows of each
    pair, each [BLOCK_M, BLOCK_N / 2]."""
    return tl.split(tl.permute(tl.reshape(y, [BLOCK_M, 2, BLOCK_N // 2]), (0, 2, 1)))


@triton.jit
def _gemv_kernel(W, X, OUT, RES, NORM_W, VALS, IDX, N, K, stride_w, stride_x, stride_o, stride_r, eps,
                 stride_xp, READY, EPOCH, stride_rp, SLOT_PTRS, ARRIVE, FLAG_PTRS, flag, stride_v, idx0,
                 M: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 PROLOGUE: tl.constexpr, RESIDUAL: tl.constexpr, ARGMAX: tl.constexpr, SWIGLU_OUT: tl.constexpr,
                 PDL: tl.constexpr, X_PARTS: tl.constexpr, RES_PARTS: tl.constexpr, PUSH: tl.constexpr,
                 SPIN: tl.constexpr):
    DT: tl.constexpr = OUT.dtype.element_ty
    ms = tl.arange(0, BLOCK_M)
    if SWIGLU_OUT:   # rows j and j + N/2 (gate and up) in one program; store silu(gate) * up [M, N/2]
        acc, _ = gemv_rows(W, X, NORM_W, N, K, stride_w, stride_x, eps, DT, M, BLOCK_M, BLOCK_N, BLOCK_K,
                           PROLOGUE, PDL, SWIGLU_OUT, X_PARTS, stride_xp, READY, EPOCH, SPIN)
        gate, up = pair_halves(acc.to(DT).to(tl.float32), BLOCK_M, BLOCK_N)   # each rounded, as F.linear
        act = (gate / (1.0 + tl.exp(-gate))).to(DT).to(tl.float32)            # F.silu, rounded
        pair = tl.program_id(0) * (BLOCK_N // 2) + tl.arange(0, BLOCK_N // 2)
        tl.store(OUT + ms[:, None] * stride_o + pair[None, :], (act * up).to(DT),
                 mask=(ms[:, None] < M) & (pair < N // 2)[None, :])
    else:
        acc, rows = gemv_rows(W, X, NORM_W, N, K, stride_w, stride_x, eps, DT, M, BLOCK_M, BLOCK_N, BLOCK_K,
                              PROLOGUE, PDL, 0, X_PARTS, stride_xp, READY, EPOCH, SPIN)
        y = acc.to(DT)                                   # the product rounded, as F.linear rounds it
        omask = (ms[:, None] < M) & (rows < N)[None, :]
        if RESIDUAL:
            r = load_x(RES, ms[:, None] * stride_r + rows[None, :], omask, RES_PARTS, stride_rp, DT)
            y = (y.to(tl.float32) + r).to(DT)
        if PUSH > 0:     # a TP exchange: into this rank's slot on every rank, then the flag
            push_rows(SLOT_PTRS, ms, rows, stride_o, y, omask, PUSH)
            if ARGMAX:   # VALS, IDX: tables of each rank's address of this rank's blocks
                for r in tl.static_range(PUSH):
                    _argmax_store(tl.load(VALS + r).to(tl.pointer_type(tl.float32)),
                                  tl.load(IDX + r).to(tl.pointer_type(tl.int32)), y, omask, ms, M, BLOCK_N,
                                  stride_v, idx0)
            signal_ranks(ARRIVE, FLAG_PTRS, flag, PUSH)
        else:
            tl.store(OUT + ms[:, None] * stride_o + rows[None, :], y, mask=omask)
            if ARGMAX:
                _argmax_store(VALS, IDX, y, omask, ms, M, BLOCK_N, stride_v, idx0)


@triton.jit
def _argmax_store(VALS, IDX, y, omask, ms, M: tl.constexpr, BLOCK_N: tl.constexpr, stride_v, idx0):
    """Each row's largest (rounded) value among this program's rows, the first on ties, and its
    index (+ idx0: where these rows start in the whole vocabulary, under TP)."""
    best, where = tl.max(tl.where(omask, y.to(tl.float32), float("-inf")), 1, return_indices=True,
                         return_indices_tie_break_left=True)
    tl.store(VALS + ms * stride_v + tl.program_id(0), best, mask=ms < M)
    tl.store(IDX + ms * stride_v + tl.program_id(0), idx0 + tl.program_id(0) * BLOCK_N + where, mask=ms < M)


def parts_of(t: torch.Tensor | Sum | None) -> tuple[torch.Tensor | None, int, int, Any, Any]:
    """A plain tensor, or a TP exchange's Sum: (rank 0's part [M, K], parts, their stride, flag, epoch)."""
    if isinstance(t, Sum):
        if t.parts.stride(-1) != 1:
            raise ValueError("an exchange's parts must be contiguous along K")
        return t.parts[0], t.world, t.parts.stride(0), t.ready, t.epoch
    return t, 1, 0, None, None


def gemv(weight: torch.Tensor, x: torch.Tensor | Sum, *, prologue: str = "plain",
         norm_weight: torch.Tensor | None = None, eps: float = 1e-5, residual: torch.Tensor | Sum | None = None,
         out: torch.Tensor | Push | None = None, pdl: bool = False, blocks: tuple[int, int] | None = None,
         num_warps: int | None = None, argmax_into: tuple[torch.Tensor, torch.Tensor] | None = None,
         epilogue: str = "plain") -> torch.Tensor:
    """x [M, K] (or [M, 2K] for prologue="swiglu") -> [M, N] = prologue(x) @ weight.T (+ residual).

    prologue: "plain", "norm" (RMSNorm with `norm_weight` and `eps` first) or "swiglu"
    (silu(x[:, :K]) * x[:, K:] first). `out` may be `residual` itself (an in-place update).
    Block shapes: `blocks` (and `num_warps`) when given, else `gemv_blocks`.
    argmax_into: (values float32, indices int32), each [M, programs] (`argmax_buffers`): each
    program's largest output of each row and its index, for `argmax.tokens_from_blocks`.
    epilogue="swiglu": weight is [gate; up] (N even); returns silu(y[:, :N/2]) * y[:, N/2:], [M, N/2].
    Tensor parallelism (exchange.py): x and residual may be an exchange's `Sum` (the ranks' parts,
    summed as they load), and `out` a `Push` (this rank's part, to every rank; returns its local slot).
    """
    if epilogue not in ("plain", "swiglu"):
        raise ValueError(f"epilogue must be 'plain' or 'swiglu', got {epilogue!r}")
    swiglu_out = epilogue == "swiglu"
    push = out if isinstance(out, Push) else None
    if swiglu_out and (weight.shape[0] % 2 or residual is not None or argmax_into is not None or push):
        raise ValueError(f"epilogue='swiglu' needs an even number of rows (got {weight.shape[0]}) and no "
                         "residual, argmax_into or Push")
    if prologue not in PROLOGUES:
        raise ValueError(f"prologue must be one of {sorted(PROLOGUES)}, got {prologue!r}")
    x, x_parts, stride_xp, ready, epoch = parts_of(x)
    residual, res_parts, stride_rp, _, _ = parts_of(residual)
    if x_parts > 1 and prologue == "swiglu":
        raise ValueError("prologue='swiglu' reads a plain x, not an exchange's Sum")
    n, k = weight.shape
    m = x.shape[0]
    want_k = 2 * k if prologue == "swiglu" else k
    if x.dim() != 2 or x.shape[1] != want_k:
        raise ValueError(f"x must be [M, {want_k}] for a {n} x {k} weight with prologue {prologue!r}, "
                         f"got {tuple(x.shape)}")
    if not 1 <= m <= MAX_ROWS:
        raise ValueError(f"{m} rows is outside [1, {MAX_ROWS}]: a larger batch is a matrix product")
    if weight.stride(1) != 1 or x.stride(1) != 1:
        raise ValueError("weight and x must be contiguous along K")
    if prologue == "norm" and norm_weight is None:
        raise ValueError("prologue='norm' needs norm_weight")
    if push is not None:
        out = push.local
        if out.shape != (m, n) or out.stride(0) != push.stride:
            raise ValueError(f"the Push slot must be [{m}, {n}] with row stride {push.stride}, got {tuple(out.shape)}")
    if out is None:
        out = torch.empty(m, n // 2 if swiglu_out else n, dtype=x.dtype, device=x.device)
    if residual is not None and residual.shape != (m, n):
        raise ValueError(f"residual must be [{m}, {n}], got {tuple(residual.shape)}")
    res = residual if residual is not None else out
    block_n, block_k = blocks or gemv_blocks(n, k, _sm_count(x.device))
    if swiglu_out and block_n % 2:
        raise ValueError(f"epilogue='swiglu' takes whole (gate, up) pairs: BLOCK_N must be even, got {block_n}")
    vals, idx = argmax_into if argmax_into is not None else (out, out)
    stride_v, idx0 = triton.cdiv(n, block_n), 0
    if push is not None and argmax_into is not None:   # the blocks go to every rank too
        if push.argmax is None:
            raise ValueError("argmax_into with a Push output needs the Push's argmax slots (Exchange.push_logits)")
        vals, idx, stride_v, idx0 = push.argmax
    elif argmax_into is not None and (vals.shape != (m, triton.cdiv(n, block_n)) or idx.shape != vals.shape):
        raise ValueError(f"argmax_into must be two [{m}, {triton.cdiv(n, block_n)}] tensors (argmax_buffers), "
                         f"got {tuple(vals.shape)} and {tuple(idx.shape)}")
    unused = weight   # a pointer argument the kernel never reads (its branch is compiled out)
    args = (weight, x, out, res, norm_weight if norm_weight is not None else weight, vals, idx, n, k,
            weight.stride(0), x.stride(0), out.stride(0), res.stride(0), eps,
            stride_xp, ready if ready is not None else unused, epoch if epoch is not None else unused, stride_rp,
            push.slot_ptrs if push else unused, push.arrive if push else unused,
            push.flag_ptrs if push else unused, push.flag if push else 0, stride_v, idx0)
    # SWIGLU_OUT is N itself (the pairs' distance, gemv_rows' PAIR_D), or 0 for a plain store
    shape = dict(M=m, BLOCK_M=max(2, triton.next_power_of_2(m)), PROLOGUE=PROLOGUES[prologue],
                 RESIDUAL=residual is not None, ARGMAX=argmax_into is not None, SWIGLU_OUT=n if swiglu_out else 0,
                 PDL=pdl, X_PARTS=x_parts, RES_PARTS=res_parts, PUSH=push.world if push else 0, SPIN=SPIN_LIMIT,
                 **({"launch_pdl": True} if pdl else {}))
    _gemv_kernel[(triton.cdiv(n, block_n),)](*args, BLOCK_N=block_n, BLOCK_K=block_k,
                                             num_warps=num_warps or NUM_WARPS, **shape)
    return out


def argmax_buffers(weight: torch.Tensor, m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Buffers for `gemv(weight, x [m, K], argmax_into=...)` with the default block shapes."""
    n, k = weight.shape
    blocks = triton.cdiv(n, gemv_blocks(n, k, _sm_count(weight.device))[0])
    return (torch.empty(m, blocks, dtype=torch.float32, device=weight.device),
            torch.empty(m, blocks, dtype=torch.int32, device=weight.device))


INTERPRETER_SMS = 4   # on a CPU (Triton's interpreter, tests): a few "SMs", so that the tests' tiny
# matrices get several rows per program, as a real model's do on the H200 (llama-1b: 2048 rows over
# 132 x 3 programs), and the interpreter, which runs each program in Python, runs few of them


def _sm_count(device: torch.device) -> int:
    if device.type != "cuda":
        return INTERPRETER_SMS
    return multiprocessors(device)
