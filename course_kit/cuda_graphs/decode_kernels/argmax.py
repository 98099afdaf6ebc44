"""Greedy decoding's argmax over the vocabulary, in two Triton kernels (notebook 05).

`logits.argmax(-1)` on one row of 128k logits runs as a single thread block in PyTorch: on the
reference H200 it took about as long as reading a tenth of the model's weights. Here the first
kernel cuts each row into blocks, one program per block, and keeps each block's maximum and its
index; the second takes, per row, the first block holding the largest maximum. Ties go to the
lowest index, as torch.argmax does.

In the decode step the first half rides in the logits product's store (`gemv(argmax_into=...)`),
so greedy decoding adds only the second kernel (`tokens_from_blocks`).
"""
from __future__ import annotations

import torch

from ...attention import use_triton_interpreter_without_cuda

use_triton_interpreter_without_cuda()   # before the first @triton.jit below

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

BLOCK = 1024


@triton.jit
def _block_argmax_kernel(LOGITS, VALS, IDX, V, stride_l, n_blocks, BLOCK: tl.constexpr, PDL: tl.constexpr):
    row = tl.program_id(0)
    blk = tl.program_id(1)
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    cols = blk * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(LOGITS + row * stride_l + cols, mask=cols < V, other=float("-inf")).to(tl.float32)
    best, where = tl.max(x, 0, return_indices=True, return_indices_tie_break_left=True)
    tl.store(VALS + row * n_blocks + blk, best)
    tl.store(IDX + row * n_blocks + blk, blk * BLOCK + where)


@triton.jit
def _row_argmax_kernel(VALS, IDX, OUT, n_blocks, BLOCKS_P: tl.constexpr, PDL: tl.constexpr):
    row = tl.program_id(0)
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    b = tl.arange(0, BLOCKS_P)
    vals = tl.load(VALS + row * n_blocks + b, mask=b < n_blocks, other=float("-inf"))
    _, first = tl.max(vals, 0, return_indices=True, return_indices_tie_break_left=True)
    tl.store(OUT + row, tl.load(IDX + row * n_blocks + first).to(tl.int64))


def tokens_from_blocks(vals: torch.Tensor, idx: torch.Tensor, pdl: bool = False,
                       out: torch.Tensor | None = None) -> torch.Tensor:
    """Each row's index of its first largest block maximum: vals, idx [B, blocks] -> int64 [B]."""
    rows, n_blocks = vals.shape
    out = torch.empty(rows, dtype=torch.int64, device=vals.device) if out is None else out
    _row_argmax_kernel[(rows,)](vals, idx, out, n_blocks, BLOCKS_P=triton.next_power_of_2(n_blocks), PDL=pdl,
                                num_warps=4, **({"launch_pdl": True} if pdl else {}))
    return out


def greedy_tokens(logits: torch.Tensor, pdl: bool = False) -> torch.Tensor:
    """logits [B, V] -> int64 [B], the index of each row's largest logit (the first, on ties)."""
    if logits.dim() != 2 or logits.stride(1) != 1:
        raise ValueError(f"logits must be a [batch, vocab] tensor contiguous along vocab, got {tuple(logits.shape)}")
    rows, vocab = logits.shape
    n_blocks = triton.cdiv(vocab, BLOCK)
    vals = torch.empty(rows, n_blocks, dtype=torch.float32, device=logits.device)
    idx = torch.empty(rows, n_blocks, dtype=torch.int32, device=logits.device)
    _block_argmax_kernel[(rows, n_blocks)](logits, vals, idx, vocab, logits.stride(0), n_blocks, BLOCK=BLOCK,
                                           PDL=pdl, num_warps=4, **({"launch_pdl": True} if pdl else {}))
    return tokens_from_blocks(vals, idx, pdl)
