"""Where gradients sit against fp16's range: underflow fractions and magnitude histograms."""
from __future__ import annotations

import math
from typing import Iterable

import torch

FP16_MIN_SUBNORMAL = 2.0**-24   # smallest positive fp16 value
FP16_MIN_NORMAL = 2.0**-14      # below this fp16 loses precision (subnormal range)
FP16_MAX = 65504.0


def flat_grads(params: Iterable[torch.Tensor]) -> torch.Tensor:
    """All gradients as one flat fp32 tensor of magnitudes (on the gradients' device)."""
    grads = [p.grad.detach().reshape(-1).float() for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(0)
    return torch.cat(grads).abs()


def underflow_fractions(mags: torch.Tensor, scale: float = 1.0) -> dict[str, float]:
    """Fractions of the non-zero gradient magnitudes `mags`, multiplied by `scale`, that would be lost
    in fp16 ("underflow": below the smallest subnormal 2**-24), that land in the subnormal range
    (kept with fewer bits), or that overflow (above 65504). Also the fraction exactly zero."""
    n = mags.numel()
    if n == 0:
        return {"zero": 0.0, "underflow": 0.0, "subnormal": 0.0, "overflow": 0.0}
    finite = mags[torch.isfinite(mags)]
    nonzero = finite[finite > 0] * scale
    m = max(nonzero.numel(), 1)
    return {
        "zero": float((mags == 0).sum()) / n,
        "underflow": float((nonzero < FP16_MIN_SUBNORMAL).sum()) / m,
        "subnormal": float(((nonzero >= FP16_MIN_SUBNORMAL) & (nonzero < FP16_MIN_NORMAL)).sum()) / m,
        "overflow": float((nonzero > FP16_MAX).sum()) / m,
    }


def log2_histogram(mags: torch.Tensor, lo: int = -40, hi: int = 4) -> dict[str, list]:
    """Counts of non-zero finite magnitudes per power of two, from 2**lo to 2**hi (clamped at the ends)."""
    if hi <= lo:
        raise ValueError(f"need lo < hi, got lo={lo}, hi={hi}")
    m = mags[torch.isfinite(mags) & (mags > 0)].float()
    e = torch.floor(torch.log2(m)).clamp(lo, hi - 1).long() - lo
    counts = torch.bincount(e.cpu(), minlength=hi - lo)
    return {"log2_lo": list(range(lo, hi)), "counts": counts.tolist(),
            "min_subnormal_log2": int(math.log2(FP16_MIN_SUBNORMAL)),
            "min_normal_log2": int(math.log2(FP16_MIN_NORMAL))}
