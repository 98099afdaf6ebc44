"""Round values into a format exactly as torch does, decompose the bits, classify the outcome.

Where torch has the dtype (fp32, bf16, fp16, fp8 e4m3fn, fp8 e5m2) the rounding *is* torch's
own cast, so the explorer can never disagree with torch, on any torch version. (PyTorch changed
what fp8 e4m3fn does beyond 448: NaN up to torch 2.11, +-448 since pytorch/pytorch#178817, see
fp8_overflow.py; the classification below reads the outcome from torch's result, so it reports
whichever happens.)
tf32 has no torch dtype: it is fp32 with the low 13 mantissa bits rounded away (round to nearest,
ties to even) by integer arithmetic. Integers use scale 1: round half to even, then saturate.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Union

import numpy as np
import torch

from .formats import Format, get_format

__all__ = ["round_to", "to_bits", "Fields", "decompose", "Rounding", "classify", "OUTCOMES",
           "tf32_round_bits"]

# The outcomes, in the order they are tested.
OUTCOMES = ("NaN", "overflow to inf", "saturated", "flushed to zero", "underflow to subnormal",
            "exact", "rounded")

Number = Union[float, int, torch.Tensor, np.ndarray]

_INT_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32}


def tf32_round_bits(fp32_bits: np.ndarray) -> np.ndarray:
    """Round fp32 bit patterns to tf32 (keep 10 mantissa bits), ties to even, in integers.

    Adding 0xFFF plus the lowest kept bit, then clearing the 13 dropped bits, rounds to nearest
    with ties to even; a carry out of the mantissa correctly bumps the exponent (up to inf).
    """
    u = np.asarray(fp32_bits, dtype=np.uint32).astype(np.uint64)
    special = (u & 0x7F800000) == 0x7F800000          # inf and NaN pass through unchanged
    rounded = (u + 0xFFF + ((u >> 13) & 1)) & ~np.uint64(0x1FFF)
    return np.where(special, u, rounded).astype(np.uint32)


def _as_f64(x: Number) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x.detach().to("cpu", torch.float64)
    return torch.as_tensor(np.asarray(x, dtype=np.float64))


def _cast(x: torch.Tensor, fmt: Format) -> tuple[torch.Tensor, torch.Tensor]:
    """(stored values as float64, bit patterns as int64) for a float64 tensor."""
    if fmt.kind == "int":
        if torch.isnan(x).any():
            raise ValueError(f"{fmt.name} cannot represent NaN; pass finite values or +-inf")
        q = torch.round(x).clamp(fmt.min, fmt.max)     # torch.round is half-to-even
        bits = q.to(torch.int64) & ((1 << fmt.bits) - 1)  # two's complement in fmt.bits
        return q, bits
    if fmt.name == "tf32":
        f32 = x.to(torch.float32).numpy()
        r = tf32_round_bits(f32.view(np.uint32))
        stored = torch.from_numpy(r.view(np.float32).astype(np.float64))
        bits = torch.from_numpy((r >> 13).astype(np.int64))
        return stored, bits
    if fmt.torch_dtype is None:
        raise ValueError(f"this torch ({torch.__version__}) has no dtype for {fmt.name}")
    y = x.to(fmt.torch_dtype)
    stored = y.to(torch.float64)
    bits = y.view(_INT_VIEW[fmt.bits // 8]).to(torch.int64) & ((1 << fmt.bits) - 1)
    return stored, bits


def round_to(x: Number, fmt: "str | Format") -> torch.Tensor:
    """The value(s) the format stores for x, as float64 (inf and NaN kept)."""
    return _cast(_as_f64(x), get_format(fmt))[0]


def to_bits(x: Number, fmt: "str | Format") -> torch.Tensor:
    """The stored bit pattern(s) of x in the format, as int64 (tf32: its 19 bits)."""
    return _cast(_as_f64(x), get_format(fmt))[1]


@dataclass(frozen=True)
class Fields:
    """A bit pattern split into its fields, most significant bit first."""

    sign: str
    exponent: str
    mantissa: str
    value: float

    @property
    def bits(self) -> str:
        return self.sign + self.exponent + self.mantissa


def _fields_from_bits(bits: int, fmt: Format) -> tuple[str, str, str]:
    s = format(bits, f"0{fmt.bits}b")
    return s[: fmt.sign_bits], s[fmt.sign_bits: fmt.sign_bits + fmt.exponent_bits], \
        s[fmt.sign_bits + fmt.exponent_bits:]


def decompose(x: float, fmt: "str | Format") -> Fields:
    """Round x into the format and split the stored bits into sign, exponent and mantissa."""
    f = get_format(fmt)
    stored, bits = _cast(_as_f64(float(x)).reshape(1), f)
    return Fields(*_fields_from_bits(int(bits[0]), f), value=float(stored[0]))


def _saturated(x: float, y: float, fmt: Format) -> bool:
    """Stored at the format's limit although round-to-nearest-even with an unbounded exponent
    (or integer range) would have gone beyond it?"""
    if y not in (fmt.max, fmt.min):
        return False
    if math.isinf(x):
        return True
    ulp = fmt.ulp_at_max
    q = round(x / ulp) * ulp                      # Python's round() is half-to-even
    return q > fmt.max or q < fmt.min


@dataclass(frozen=True)
class Rounding:
    """What happened to one value stored in one format."""

    format: str
    input: float
    stored: float
    bits: int
    fields: Fields
    outcome: str
    rel_error: float


def _outcome(x: float, y: float, fmt: Format) -> str:
    if math.isnan(y):
        return "NaN"
    if y == x and (x == 0 or math.isinf(x)):
        return "exact"
    if math.isinf(y) and not math.isinf(x):
        return "overflow to inf"
    if _saturated(x, y, fmt):
        return "saturated"
    if y == 0:
        return "flushed to zero"
    if fmt.kind == "float" and abs(y) < fmt.smallest_normal:
        return "underflow to subnormal"
    return "exact" if y == x else "rounded"


def _rel_error(x: float, y: float) -> float:
    if math.isnan(x) or math.isnan(y):
        return math.nan
    if x == y:
        return 0.0
    if math.isinf(x) or math.isinf(y):
        return math.inf
    return abs(y - x) / abs(x) if x != 0 else math.inf


def classify(x: float, fmt: "str | Format") -> Rounding:
    """Store x in the format (torch's own cast where torch has the dtype) and say what happened.

    Outcomes: "exact", "rounded", "underflow to subnormal" (stored non-zero below the smallest
    normal, so with fewer significant bits),
    "flushed to zero", "overflow to inf", "saturated" (clamped to +-max where rounding would have
    overflowed), "NaN". The relative error is |stored - x| / |x| in float64.
    """
    f = get_format(fmt)
    x = float(x)
    stored, bits = _cast(_as_f64(x).reshape(1), f)
    y = float(stored[0])
    fields = Fields(*_fields_from_bits(int(bits[0]), f), value=y)
    outcome = "NaN" if math.isnan(x) else _outcome(x, y, f)
    return Rounding(f.name, x, y, int(bits[0]), fields, outcome, _rel_error(x, y))
