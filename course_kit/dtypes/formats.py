"""The number formats of the course, described from their bit layout.

Every limit (max, smallest normal, smallest subnormal, epsilon) is *derived* from the sign,
exponent and mantissa widths and the special-value rules, never typed in, so the tests can
compare the derivation against torch.finfo and the published IEEE 754 / OCP fp8 tables.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch

__all__ = ["Format", "FORMATS", "FORMAT_NAMES", "get_format"]


@dataclass(frozen=True)
class Format:
    """One number format: its bit layout, its limits and its special-value rules."""

    name: str
    kind: str                      # "float" or "int"
    sign_bits: int
    exponent_bits: int             # 0 for integers
    mantissa_bits: int             # stored fraction bits; for integers the value bits
    has_inf: bool
    nan_rule: str                  # human-readable rule for NaN encodings
    torch_dtype: Optional[torch.dtype]
    note: str = ""

    @property
    def bits(self) -> int:
        return self.sign_bits + self.exponent_bits + self.mantissa_bits

    @property
    def bytes(self) -> float:
        return self.bits / 8

    @property
    def bias(self) -> Optional[int]:
        if self.kind != "float":
            return None
        return 2 ** (self.exponent_bits - 1) - 1

    @property
    def max(self) -> float:
        if self.kind == "int":
            return float(2 ** self.mantissa_bits - 1)
        m = self.mantissa_bits
        if self.has_inf:
            # IEEE: the all-ones exponent is reserved for inf/NaN; max uses the one below it.
            e_max = (2 ** self.exponent_bits - 2) - self.bias
            return (2 - 2.0 ** -m) * 2.0 ** e_max
        # e4m3fn: the all-ones exponent holds normal numbers, except S.1111.111 which is NaN,
        # so the largest mantissa there is all-ones minus one.
        e_max = (2 ** self.exponent_bits - 1) - self.bias
        return (2 - 2 * 2.0 ** -m) * 2.0 ** e_max

    @property
    def min(self) -> float:
        """The most negative finite value."""
        if self.kind == "int":
            return -float(2 ** self.mantissa_bits)
        return -self.max

    @property
    def smallest_normal(self) -> Optional[float]:
        if self.kind != "float":
            return None
        return 2.0 ** (1 - self.bias)

    @property
    def smallest_subnormal(self) -> Optional[float]:
        if self.kind != "float":
            return None
        return 2.0 ** (1 - self.bias - self.mantissa_bits)

    @property
    def eps(self) -> float:
        """Gap between 1 and the next representable value (1 for integers)."""
        if self.kind == "int":
            return 1.0
        return 2.0 ** -self.mantissa_bits

    @property
    def ulp_at_max(self) -> float:
        if self.kind == "int":
            return 1.0
        _, e = math.frexp(self.max)          # max = f * 2**e with 0.5 <= f < 1
        return 2.0 ** (e - 1 - self.mantissa_bits)

    def limits(self) -> dict:
        """The table row shown in the notebook."""
        return {
            "format": self.name, "bits": self.bits, "sign": self.sign_bits,
            "exponent": self.exponent_bits, "mantissa": self.mantissa_bits, "bias": self.bias,
            "max": self.max, "smallest normal": self.smallest_normal,
            "smallest subnormal": self.smallest_subnormal, "eps": self.eps,
            "inf": self.has_inf, "NaN": self.nan_rule,
        }


def _dtype(name: str) -> Optional[torch.dtype]:
    # fp8 dtypes exist from torch 2.1; guarded so that an older torch still imports the module.
    return getattr(torch, name, None)


FORMATS: dict[str, Format] = {
    f.name: f
    for f in [
        Format("fp32", "float", 1, 8, 23, True, "exponent all ones, mantissa non-zero",
               torch.float32, "IEEE 754 binary32"),
        Format("tf32", "float", 1, 8, 10, True, "exponent all ones, mantissa non-zero",
               None, "tensor-core input format: fp32 range, fp16 precision; rounded here "
               "from fp32 with round-to-nearest-even"),
        Format("bf16", "float", 1, 8, 7, True, "exponent all ones, mantissa non-zero",
               torch.bfloat16, "brain float: fp32 range, 8 bits of precision"),
        Format("fp16", "float", 1, 5, 10, True, "exponent all ones, mantissa non-zero",
               torch.float16, "IEEE 754 binary16"),
        Format("fp8_e4m3fn", "float", 1, 4, 3, False, "only S.1111.111 (no infinities)",
               _dtype("float8_e4m3fn"), "OCP FP8 E4M3: finite only"),
        Format("fp8_e5m2", "float", 1, 5, 2, True, "exponent all ones, mantissa non-zero",
               _dtype("float8_e5m2"), "OCP FP8 E5M2: IEEE-like"),
        Format("int8", "int", 1, 0, 7, False, "none (integers have no NaN)", torch.int8,
               "two's complement, scale 1: round half to even, then saturate"),
        Format("int4", "int", 1, 0, 3, False, "none (integers have no NaN)", None,
               "two's complement, scale 1: round half to even, then saturate"),
    ]
}
FORMAT_NAMES: tuple[str, ...] = tuple(FORMATS)

_ALIASES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "half": "fp16",
            "e4m3": "fp8_e4m3fn", "e4m3fn": "fp8_e4m3fn", "float8_e4m3fn": "fp8_e4m3fn",
            "e5m2": "fp8_e5m2", "float8_e5m2": "fp8_e5m2"}


def get_format(name: "str | Format") -> Format:
    """Look up a format by name (or alias); ValueError names the allowed choices."""
    if isinstance(name, Format):
        return name
    key = _ALIASES.get(str(name).lower(), str(name).lower())
    if key not in FORMATS:
        raise ValueError(f"unknown format {name!r}; choose one of {list(FORMAT_NAMES)}")
    return FORMATS[key]
