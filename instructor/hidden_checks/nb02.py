"""Hidden check of notebook 02: unscale_and_clip on more seeded gradient sets than the public check
(many tensors, -inf and NaN in different places, scales from 1 to 2^24, max_norm above and below
the norm), against torch's GradScaler.unscale_ + clip_grad_norm_."""
from __future__ import annotations

import math

import torch

from course_kit import grading
from course_kit.grading.checks import feedback
from course_kit.grading.checks.nb02 import torch_unscale_clip


def _cases() -> list[tuple]:
    g = torch.Generator().manual_seed(2024)
    cases = []
    for i in range(24):
        scale = float(2 ** int(torch.randint(0, 25, (1,), generator=g))) * (1.0 if i % 4 else 3.0)
        sizes = [int(torch.randint(1, 40, (1,), generator=g)) for _ in range(1 + i % 5)]
        size = 10.0 ** float(torch.empty(1).uniform_(-4, 1, generator=g))
        grads = [torch.randn(n, generator=g) * size * scale for n in sizes]
        if i % 7 == 3:
            grads[-1][0] = -math.inf
        if i % 11 == 5:
            grads[0][-1] = math.nan
        max_norm = size * float(torch.empty(1).uniform_(0.2, 20.0, generator=g))
        cases.append((grads, scale, max_norm))
    return cases


@grading.exercise("02.unscale_clip_hidden", cases=_cases)
def unscale_clip_hidden(fn) -> None:
    for k, (grads, scale, max_norm) in enumerate(_cases()):
        found, want = fn(grads, scale, max_norm), torch_unscale_clip(grads, scale, max_norm)
        what = f"unscale_and_clip on hidden case {k}"
        if want is None:
            if found is not None:
                raise grading.Wrong(f"{what}: the step must be skipped (return None)")
            continue
        if not (isinstance(found, (list, tuple)) and len(found) == len(want)):
            raise grading.Wrong(f"{what}: expected a list of {len(want)} tensors, found {feedback.describe(found)}")
        for i, (f, w) in enumerate(zip(found, want)):
            feedback.tensor(f, w, f"{what}, gradient {i}", rtol=2e-6, atol=0.0)


# ---- 02.rescue_scale: the answer key ---
# Mean-reduced cross-entropy: each logit's gradient carries 1 / (batch x tokens), so twice the batch
# halves every gradient and needs twice the scale to stay normal in fp16: C. (LOG2_SCALE, 7 here, is
# checked by measuring at 2**k and 2**(k-1); tests/test_answer_keys.py measures both.)
grading.answer_key("02.rescue_scale", log2=7, doubled="C")
