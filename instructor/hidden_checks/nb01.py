"""Hidden check of notebook 01: round_to_e4m3 on random fp32 bit patterns (every exponent, every
mantissa: deep subnormals, ties at random places, saturation), against torch's own cast."""
from __future__ import annotations

import torch

from course_kit import grading
from course_kit.grading.checks import feedback
from course_kit.grading.checks.nb01 import CULPRITS
from course_kit.grading.checks.nb01 import compare_fp8, from_bits


def _cases() -> list[tuple]:
    g = torch.Generator().manual_seed(202)
    n = 20000
    mant = torch.randint(0, 1 << 23, (n,), generator=g, dtype=torch.int64)
    # half the exponents anywhere, half around e4m3fn's range (2^-12 .. 2^9), where the rounding happens
    exp = torch.where(torch.rand(n, generator=g) < 0.5, torch.randint(0, 255, (n,), generator=g),
                      torch.randint(127 - 12, 127 + 10, (n,), generator=g)).to(torch.int64)
    # a quarter of the mantissas cut to 4 bits past e4m3's three: exact ties and near ties
    mant = torch.where(torch.rand(n, generator=g) < 0.25, mant & ~((1 << 19) - 1) | (1 << 19), mant)
    sign = torch.randint(0, 2, (n,), generator=g, dtype=torch.int64) << 31
    x = from_bits(((sign | exp << 23 | mant) & 0xFFFFFFFF).tolist())
    return [(x[~torch.isnan(x)],)]          # NaN payloads: only "is NaN" is meaningful, covered by the public check


@grading.exercise("01.fp8_round_hidden", cases=_cases)
def fp8_round_hidden(fn) -> None:
    compare_fp8(fn, _cases()[0][0], "random bit patterns")


# ---- 01.overflow_point: the multiple-choice part, kept out of the installed package ---
CULPRIT_ANSWER = "B"   # the matmul: 64 x^2 passes fp16's max; softmax subtracts the row max


@grading.exercise("01.overflow_point_hidden")
def overflow_point_hidden(culprit) -> None:
    found = feedback.choice(culprit, "CULPRIT", CULPRITS)
    grading.expect(found == CULPRIT_ANSWER, "CULPRIT names an operation that does not overflow first",
                   CULPRIT_ANSWER, culprit)


# ---- answer keys ---
# 01.predict_overflow, one outcome per case of OVERFLOW_CASES (IEEE 754 and OCP fp8 limits):
# fp16 65519 rounds to its max 65504 (below max + half an ulp, 65520); 65536 overflows to inf; 3e-8 is
# above half the smallest subnormal (2^-25 = 2.98e-8): a subnormal; 2.9e-8 is below it: flushed;
# e4m3fn 240 is exact (a multiple of its spacing 16 there); 250 rounds (to 256); 0.0009 is below half
# its smallest subnormal (2^-10 = 0.00098): flushed; e5m2 0.001 is in its normal range but needs more than 2 mantissa bits: rounded; int8
# 127.5 saturates at 127; int4 8 saturates at 7; fp32 16777217 = 2^24 + 1 rounds (24-bit significand);
# fp32 1e-46 is below half its smallest subnormal (1.4e-45 / 2): flushed. (tests/test_answer_keys.py:
# dtypes.classify gives the same.)
grading.answer_key("01.predict_overflow", outcomes=[
    "rounded", "overflow to inf", "underflow to subnormal", "flushed to zero", "exact", "rounded",
    "flushed to zero", "rounded", "saturated", "saturated", "rounded", "flushed to zero"])
# 01.overflow_point (checked by what the points must be; kept for the tests): q = k = a 4 x 64 matrix
# of x, so a score is 64 x^2, past fp16's 65504 from x = 32 (31.97, the fp16 value below, gives 65408);
# scaled by 1/8 on q first, 8 x^2 passes from x = 90.5 (8 x 90.5^2 = 65522 rounds to inf; 90.4375 does not).
grading.answer_key("01.overflow_point", after=32.0, before=90.5)
# 01.memory: per layer q and o 3584^2 each, k and v 3584 x 512 each (4 KV heads of 128), biases
# 3584 + 2 x 512, MLP 3 x 3584 x 18944, norms 2 x 3584: 233,057,792; x 28 layers, + 2 embeddings
# 152064 x 3584 + the final norm 3584 = 7,615,616,512 (Qwen2.5-7B's published count). KV cache: K and V,
# 28 layers x 4 KV heads x 128 x 2 bytes, x 32768 tokens x 4 sequences = 7,516,192,768 bytes = 7.0 GiB.
grading.answer_key("01.memory", n_params=7_615_616_512, kv_gib=7.0)
