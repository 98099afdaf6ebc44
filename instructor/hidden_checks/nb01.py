"""Hidden check of notebook 01 (example of a hidden check): round_to_bf16 on random bit patterns."""
from __future__ import annotations

import torch

from course_kit import grading
from course_kit.grading.checks.nb01 import compare_bf16, from_bits


def _cases() -> list[tuple]:
    g = torch.Generator().manual_seed(202)
    bits = torch.randint(0, 2 ** 31 - 1, (20000,), generator=g, dtype=torch.int64)
    sign = torch.randint(0, 2, (20000,), generator=g, dtype=torch.int64) << 31
    x = from_bits(((bits | sign) & 0xFFFFFFFF).tolist())
    return [(x[~torch.isnan(x)],)]          # random NaN payloads: only "is NaN" is meaningful


@grading.exercise("01.bf16_round_hidden", cases=_cases)
def bf16_round_hidden(fn) -> None:
    compare_bf16(fn, _cases()[0][0], "random bit patterns")
