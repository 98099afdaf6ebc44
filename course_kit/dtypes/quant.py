"""int8 and int4 quantisation: symmetric or asymmetric scales, per tensor or per channel.

    symmetric:  scale = max|x| / qmax,                      zero_point = 0
    asymmetric: scale = (max x - min x) / (qmax - qmin),    zero_point = qmin - round(min x / scale)
    q = clamp(round(x / scale) + zero_point, qmin, qmax);   x_hat = (q - zero_point) * scale

The range always includes 0, so that 0 is stored exactly (padding and ReLU zeros stay zero).
Rounding is half to even, as torch's fake_quantize does, which the tests use as the oracle.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch

__all__ = ["QuantResult", "quantize", "qrange"]


def qrange(bits: int) -> tuple[int, int]:
    """The signed integer range of a bit width: (-2**(b-1), 2**(b-1) - 1)."""
    if bits not in (4, 8):
        raise ValueError(f"bits must be 4 or 8, got {bits!r}")
    return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1


@dataclass
class QuantResult:
    """Quantised values, their scales and zero points, the reconstruction and its error."""

    q: torch.Tensor               # integer codes (int8 storage, also for int4)
    scale: torch.Tensor           # one per tensor (shape []) or per channel
    zero_point: torch.Tensor      # same shape as scale, int
    dequant: torch.Tensor         # (q - zero_point) * scale, float32
    bits: int
    symmetric: bool
    axis: Optional[int]           # None: per tensor
    max_abs_error: float
    rmse: float
    rel_error: float              # ||x - x_hat|| / ||x||
    sqnr_db: float                # 10 log10(signal power / noise power)

    @property
    def scheme(self) -> str:
        gran = "per tensor" if self.axis is None else f"per channel (axis {self.axis})"
        return f"int{self.bits} {'symmetric' if self.symmetric else 'asymmetric'}, {gran}"

    def summary(self) -> dict:
        return {"scheme": self.scheme, "max abs error": self.max_abs_error, "rmse": self.rmse,
                "relative error": self.rel_error, "SQNR (dB)": self.sqnr_db}


def _reduce(x: torch.Tensor, axis: Optional[int], fn) -> torch.Tensor:
    if axis is None:
        return fn(x.reshape(-1), dim=0)
    dims = [d for d in range(x.dim()) if d != axis]
    return fn(x.permute(axis, *dims).reshape(x.shape[axis], -1), dim=1)


def _bcast(v: torch.Tensor, x: torch.Tensor, axis: Optional[int]) -> torch.Tensor:
    if axis is None:
        return v
    shape = [1] * x.dim()
    shape[axis] = -1
    return v.reshape(shape)


def quantize(x: torch.Tensor, bits: int = 8, *, symmetric: bool = True,
             axis: Optional[int] = None) -> QuantResult:
    """Quantise x to int8 or int4; axis=None is per tensor, axis=k one scale per slice along k."""
    qmin, qmax = qrange(bits)
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise ValueError(f"x must be a floating-point tensor, got {type(x).__name__}")
    if axis is not None and not -x.dim() <= axis < x.dim():
        raise ValueError(f"axis {axis!r} out of range for a {x.dim()}-d tensor "
                         f"(allowed: None or {-x.dim()}..{x.dim() - 1})")
    if not torch.isfinite(x).all():
        raise ValueError("x contains inf or NaN; quantisation needs finite values")
    axis = None if axis is None else axis % x.dim()
    xf = x.detach().to(torch.float32)
    lo = _reduce(xf, axis, lambda t, dim: t.min(dim=dim).values).clamp(max=0.0)
    hi = _reduce(xf, axis, lambda t, dim: t.max(dim=dim).values).clamp(min=0.0)
    tiny = torch.finfo(torch.float32).tiny              # an all-zero slice still gets a scale
    if symmetric:
        scale = (torch.maximum(-lo, hi) / qmax).clamp(min=tiny)
        zp = torch.zeros_like(scale, dtype=torch.int64)
    else:
        scale = ((hi - lo) / (qmax - qmin)).clamp(min=tiny)
        zp = (qmin - torch.round(lo / scale)).to(torch.int64).clamp(qmin, qmax)
    s, z = _bcast(scale, xf, axis), _bcast(zp, xf, axis)
    q = (torch.round(xf / s) + z).clamp(qmin, qmax)
    dq = (q - z) * s
    err = (xf - dq).double()
    x64 = xf.double()
    noise, signal = err.pow(2).sum().item(), x64.pow(2).sum().item()
    return QuantResult(
        q=q.to(torch.int8), scale=scale, zero_point=zp, dequant=dq, bits=bits,
        symmetric=symmetric, axis=axis,
        max_abs_error=err.abs().max().item(), rmse=math.sqrt(noise / max(err.numel(), 1)),
        rel_error=math.sqrt(noise / signal) if signal > 0 else 0.0,
        sqnr_db=10 * math.log10(signal / noise) if noise > 0 else math.inf,
    )
