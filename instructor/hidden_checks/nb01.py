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
