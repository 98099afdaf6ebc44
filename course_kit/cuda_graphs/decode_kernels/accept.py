"""Speculative decoding's greedy acceptance in one Triton kernel (notebook 10; speculative/decoder.py).

After the verify pass, `rules.accept_greedy` and the bookkeeping around it are a dozen tiny PyTorch
kernels: each row's argmax, the comparison with the draft, a cumulative product and a sum, writing
the new tokens into the sequence, moving its length, counting the kept positions, and gathering the
two last tokens for the next round. At batch 1 each costs a launch, not work, and together they
cost about as much as one layer of the target. Here one program does all of it, reading the
per-block maxima that the verify pass's logits product already stored (`gemv(argmax_into=...)`),
as notebook 05's greedy step does.

Inputs and effects, for K draft tokens and the sequence's length L (last token x at L - 1):
    target token i = the argmax of verify row i (the first block holding the row's largest maximum,
    then that block's index), i = 0..K; j = the number of leading i < K with token i == d_{i+1};
    seq[L .. L+K] = the target tokens (the first j + 1 are the round's output); L += j + 1;
    kept[i] += 1 for i < j; pair = (the tokens at the new L - 2 and L - 1); buf[0] = the new last.
"""
from __future__ import annotations

import torch

from ...device import use_triton_interpreter_without_cuda

use_triton_interpreter_without_cuda()   # before the first @triton.jit below

import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def _accept_greedy_kernel(VALS, IDX, n_blocks, BUF, SEQ, LENGTH, KEPT, PAIR,
                          K: tl.constexpr, KP: tl.constexpr, BLOCKS_P: tl.constexpr, PDL: tl.constexpr):
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    rows = tl.arange(0, KP)
    live = rows < K + 1
    b = tl.arange(0, BLOCKS_P)
    vals = tl.load(VALS + rows[:, None] * n_blocks + b[None, :], mask=live[:, None] & (b < n_blocks)[None, :],
                   other=float("-inf"))
    best = tl.max(vals, 1)
    first = tl.min(tl.where(vals == best[:, None], b[None, :], BLOCKS_P), 1)      # ties: the lowest block
    tgt = tl.load(IDX + rows * n_blocks + first, mask=live, other=0).to(tl.int64)
    draft = tl.load(BUF + rows + 1, mask=rows < K, other=-1)
    miss = tl.where((tgt == draft) & (rows < K), KP, rows)                        # row K never matches
    j = tl.min(miss, 0)
    length = tl.load(LENGTH)
    tl.store(SEQ + length + rows, tgt, mask=live)
    tl.store(LENGTH, length + j + 1)
    kept = tl.load(KEPT + rows, mask=rows < K, other=0)
    tl.store(KEPT + rows, kept + (rows < j).to(tl.int64), mask=rows < K)
    last = tl.sum(tl.where(rows == j, tgt, 0), 0)
    before = tl.sum(tl.where(rows == j - 1, tgt, 0), 0)
    old_last = tl.load(SEQ + length - 1)
    prev = tl.where(j > 0, before, old_last)
    tl.store(PAIR, prev)
    tl.store(PAIR + 1, last)
    tl.store(BUF, last)


def accept_greedy_fused(vals: torch.Tensor, idx: torch.Tensor, buf: torch.Tensor, seq: torch.Tensor,
                        length: torch.Tensor, kept: torch.Tensor, pair: torch.Tensor, pdl: bool = False) -> None:
    """One program: vals/idx [K+1, blocks] (the verify logits' block maxima and their indices),
    buf [K+1] (x, d_1..d_K), seq, length [1], kept [>= K], pair [2], all int64 but vals/idx."""
    rows, n_blocks = vals.shape
    K = rows - 1
    if buf.shape[0] != rows or idx.shape != vals.shape:
        raise ValueError(f"vals/idx must be [{buf.shape[0]}, blocks] for a buffer of {buf.shape[0]} tokens, "
                         f"got {tuple(vals.shape)} and {tuple(idx.shape)}")
    _accept_greedy_kernel[(1,)](vals, idx, n_blocks, buf, seq, length, kept, pair, K=K,
                                KP=max(2, triton.next_power_of_2(K + 1)), BLOCKS_P=triton.next_power_of_2(n_blocks),
                                PDL=pdl, num_warps=1, **({"launch_pdl": True} if pdl else {}))
