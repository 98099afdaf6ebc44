"""How the weight-only kernels (woq_gemv.py) find their codes: int8 and int4 weights packed in int32 words.

The values are `dtypes/woq.py`'s, the ones torch's peers take: int8 codes q in -127..127 with one
fp32 scale per output row (w = q * scale); int4 codes q in 0..15 in groups of `group_size` along K
with a scale and a zero per group, rounded to bf16 as torch's `_weight_int4pack_mm` takes them
(w = (q - 8) * scale + zero). Only where the codes sit is the kernel's own, as tinygemm's is its own:

- int32 words, so one 16-byte load brings 16 int8 or 32 int4 codes;
- in a group of int4 (or a block of 128 int8 columns), word i holds the columns i, i + W, i + 2W, ...
  (W words per group; code p at bits p * 4, or p * 8): the activations each of a word's codes
  multiplies are one contiguous run of x, and every word's codes come out by the same shifts.

`dequantise` reads the packing back to fp32 weights: the oracle's weights (tests check it against
woq.py's own dequantisers, so the two cannot drift apart).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ...dtypes import woq

FORMATS = ("int8", "int4")
INT8_BLOCK = 128          # int8 columns per packing block: 32 words of 4 planes
PLANES = {"int8": 4, "int4": 8}   # codes per int32 word
BITS = {"int8": 8, "int4": 4}


@dataclass(frozen=True)
class QuantWeight:
    """A weight [N, K] packed for these kernels. int8: words [N, 32 * ceil(K / 128)] and scales [N]
    fp32. int4: words [N, K / 8] and scales [N, K / group_size] int32, each the bf16 scale (low half)
    and bf16 zero (high half) of one group."""
    fmt: str
    words: torch.Tensor
    scales: torch.Tensor
    n: int
    k: int
    group_size: int        # int4: the quantisation group; int8: INT8_BLOCK (the packing block)

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n, self.k)

    @property
    def nbytes(self) -> int:
        """Bytes a product reads: every code and every scale, once."""
        return self.words.numel() * 4 + self.scales.numel() * self.scales.element_size()

    def to(self, device: str | torch.device) -> "QuantWeight":
        return QuantWeight(self.fmt, self.words.to(device), self.scales.to(device), self.n, self.k, self.group_size)


def _planes_to_words(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """codes [..., words, planes] (small non-negative ints) -> int32 words, plane p at bits p*bits."""
    shifted = codes.to(torch.int64) << (torch.arange(codes.shape[-1], device=codes.device) * bits)
    words = shifted.sum(-1)                                   # < 2^32, exact in int64
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)


def pack_int8(q: torch.Tensor, scale: torch.Tensor) -> QuantWeight:
    """woq.quantize_int8's (q [N, K] int8, scale [N]) in this kernel's layout: K padded with zero
    codes to blocks of 128 columns; in block b, word i holds columns b*128 + i + 32*j at byte j."""
    if q.dim() != 2 or q.dtype != torch.int8 or scale.shape != (q.shape[0],):
        raise ValueError(f"need q [N, K] int8 and scale [N], got {tuple(q.shape)} {q.dtype} and {tuple(scale.shape)}")
    n, k = q.shape
    blocks = -(-k // INT8_BLOCK)
    padded = torch.zeros(n, blocks * INT8_BLOCK, dtype=torch.int16, device=q.device)
    padded[:, :k] = q.to(torch.int16) & 0xFF                     # two's complement bytes
    planes = padded.view(n, blocks, 4, INT8_BLOCK // 4).transpose(-1, -2)   # [N, blocks, 32 words, 4]
    words = _planes_to_words(planes, 8).reshape(n, blocks * INT8_BLOCK // 4).contiguous()
    return QuantWeight("int8", words, scale.float().contiguous(), n, k, INT8_BLOCK)


def pack_int4(q: torch.Tensor, sz: torch.Tensor, group_size: int) -> QuantWeight:
    """woq.quantize_int4's (q [N, K] in 0..15, scales_and_zeros [K / gs, N, 2]) in this kernel's
    layout: in group g, word i holds columns g*gs + i + p*gs/8 at bits 4p; scale and zero as bf16."""
    n, k = q.shape
    if group_size not in (32, 64, 128, 256) or k % group_size or sz.shape != (k // group_size, n, 2):
        raise ValueError(f"need q [N, K] with group_size in (32, 64, 128, 256) dividing K and scales_and_zeros "
                         f"[K/gs, N, 2]; got q {tuple(q.shape)}, group_size {group_size}, sz {tuple(sz.shape)}")
    if q.min() < 0 or q.max() > 15:
        raise ValueError(f"int4 codes must lie in 0..15, got {int(q.min())}..{int(q.max())}")
    w = group_size // 8
    planes = q.reshape(n, k // group_size, 8, w).transpose(-1, -2)          # [N, groups, W words, 8]
    words = _planes_to_words(planes, 4).reshape(n, k // 8).contiguous()
    halves = sz.to(torch.bfloat16).transpose(0, 1).contiguous()             # [N, groups, (scale, zero)]
    bits = halves.view(torch.int16).to(torch.int64) & 0xFFFF
    scales = _planes_to_words(bits, 16)                                      # scale low, zero high
    return QuantWeight("int4", words, scales.contiguous(), n, k, group_size)


def quantise(w: torch.Tensor, fmt: str, group_size: int = 128) -> QuantWeight:
    """w [N, K] -> QuantWeight, quantised by dtypes/woq.py (int8 per row, int4 in groups along K)."""
    if fmt == "int8":
        return pack_int8(*woq.quantize_int8(w))
    if fmt == "int4":
        q, sz = woq.quantize_int4(w, group_size)
        return pack_int4(q, sz, group_size)
    raise ValueError(f"weight format must be one of {FORMATS}, got {fmt!r}")


def dequantise(qw: QuantWeight) -> torch.Tensor:
    """The fp32 weights [N, K] the kernel multiplies by (the oracle's weights), read back from the packing."""
    bits, planes = BITS[qw.fmt], PLANES[qw.fmt]
    shifts = torch.arange(planes, device=qw.words.device) * bits
    codes = (qw.words.to(torch.int64)[..., None] >> shifts) & ((1 << bits) - 1)      # [N, words, planes]
    per = qw.group_size // planes                                                   # words per group
    cols = codes.reshape(qw.n, -1, per, planes).transpose(-1, -2).reshape(qw.n, -1)  # back to column order
    if qw.fmt == "int8":
        q = torch.where(cols >= 128, cols - 256, cols)[:, :qw.k]
        return q.float() * qw.scales.float()[:, None]
    s = qw.scales.to(torch.int64)
    scale, zero = _bf16_from_bits(s & 0xFFFF), _bf16_from_bits((s >> 16) & 0xFFFF)
    g = qw.group_size
    return (cols.float() - 8.0) * scale.repeat_interleave(g, 1) + zero.repeat_interleave(g, 1)


def _bf16_from_bits(bits: torch.Tensor) -> torch.Tensor:
    """int64 tensor of 16-bit patterns -> their bf16 values, in fp32."""
    return (bits.to(torch.int32) << 16).view(torch.float32)
