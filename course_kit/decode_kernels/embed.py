"""The token embedding as the first kernel of the PDL chain (notebook 05's decode step).

`F.embedding` is one small PyTorch kernel: it knows nothing of programmatic dependent launch, so
the step's first product could only start once it had finished. This kernel copies each row's
embedding the same way, but first lets the next kernel launch: the q/k/v product of layer 0 then
reads its first weights while the embedding is still being copied.
"""
from __future__ import annotations

import torch

from ..attention import use_triton_interpreter_without_cuda

use_triton_interpreter_without_cuda()   # before the first @triton.jit below

import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def _embed_kernel(TABLE, TOKENS, OUT, D, stride_t, stride_o, BLOCK: tl.constexpr, PDL: tl.constexpr):
    if PDL:   # the next kernel may launch now; wait for whatever wrote the tokens
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    m = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    tok = tl.load(TOKENS + m).to(tl.int64)
    row = tl.load(TABLE + tok * stride_t + cols, mask=cols < D)
    tl.store(OUT + m * stride_o + cols, row, mask=cols < D)


def embed(table: torch.Tensor, tokens: torch.Tensor, pdl: bool = False, block: int = 1024) -> torch.Tensor:
    """tokens [B] -> table[tokens] [B, D], as F.embedding."""
    if tokens.dim() != 1 or table.dim() != 2 or table.stride(1) != 1:
        raise ValueError(f"tokens must be [B] and the table a row-contiguous [V, D], got {tuple(tokens.shape)} "
                         f"and {tuple(table.shape)}")
    b, d = tokens.shape[0], table.shape[1]
    out = torch.empty(b, d, dtype=table.dtype, device=table.device)
    _embed_kernel[(b, triton.cdiv(d, block))](table, tokens, out, d, table.stride(0), out.stride(0), BLOCK=block,
                                              PDL=pdl, num_warps=4, **({"launch_pdl": True} if pdl else {}))
    return out
