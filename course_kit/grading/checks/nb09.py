"""Checks for notebook 09 (parallelism).

- 09.column_backward (implement what was not shown): the backward pass of a column-parallel linear
  on N ranks simulated in one process (lists of per-rank tensors). The oracle is torch.autograd on
  the unsharded linear, fed the concatenated grad_out; the cases vary the rank count (1 to 4), the
  leading dimensions of the tokens (none, one, several) and include shards of unequal sizes (as
  torch.tensor_split cuts them).
- 09.interleaved_bubble (predict -> measure -> explain): the idle fraction and rank 0's peak of
  activations of an interleaved 1F1B schedule, measured with the notebook's pure schedule
  simulation (course_kit.parallel.schedules), and the reason interleaving shrinks the bubble. The
  measured values are the instructor's answer key (instructor/hidden_checks/nb09.py).
"""
from __future__ import annotations

import math
from typing import Any

import torch

from course_kit import grading
from course_kit.grading.checks import feedback, registry

# ---- 09.column_backward -------------------------------------------------------------------------

# (leading shape of the tokens, in features, out features, ranks)
COLUMN_SHAPES = [((4,), 6, 8, 2), ((2, 3), 5, 9, 3), ((7,), 8, 10, 4), ((), 4, 6, 1),
                 ((2, 2, 3), 16, 12, 4), ((5,), 3, 7, 2)]


def column_cases(shapes: list[tuple] = COLUMN_SHAPES, seed: int = 909) -> list[tuple]:
    """(x, weight_shards, grad_out_shards) per case: W and grad_out cut along the output features
    with torch.tensor_split (shards differ by one row where out is not a multiple of the ranks)."""
    cases = []
    for i, (lead, d_in, d_out, n) in enumerate(shapes):
        g = torch.Generator().manual_seed(seed + i)
        x = torch.randn(*lead, d_in, generator=g)
        w = torch.randn(d_out, d_in, generator=g)
        grad_out = torch.randn(*lead, d_out, generator=g)
        cases.append((x, [s.clone() for s in torch.tensor_split(w, n, dim=0)],
                      [s.clone() for s in torch.tensor_split(grad_out, n, dim=-1)]))
    return cases


def column_oracle(x: torch.Tensor, weight_shards: list, grad_out_shards: list) -> tuple:
    """torch.autograd on the unsharded linear y = x W^T + b: (grad_x, grad_W shards, grad_b shards)."""
    x = x.clone().requires_grad_(True)
    w = torch.cat(weight_shards, 0).requires_grad_(True)
    b = torch.zeros(w.shape[0], dtype=w.dtype, requires_grad=True)
    torch.nn.functional.linear(x, w, b).backward(torch.cat(grad_out_shards, -1))
    sizes = [s.shape[0] for s in weight_shards]
    return x.grad, list(torch.split(w.grad, sizes, 0)), list(torch.split(b.grad, sizes, 0))


def _describe_case(x: torch.Tensor, weight_shards: list) -> str:
    sizes = [s.shape[0] for s in weight_shards]
    uneven = ", shards of unequal sizes" if len(set(sizes)) > 1 else ""
    return f"x of shape {tuple(x.shape)}, {len(sizes)} rank{'s' * (len(sizes) > 1)}{uneven}"


def judge_column_backward(fn: Any, cases: list[tuple]) -> None:
    for x, ws, gs in cases:
        want_x, want_w, want_b = column_oracle(x, ws, gs)
        what = _describe_case(x, ws)
        found = fn(x, ws, gs)
        if not (isinstance(found, (tuple, list)) and len(found) == 3):
            raise grading.Wrong(f"{what}: expected a tuple (grad_input, grad_weight_shards, grad_bias_shards), "
                                f"found {feedback.describe(found)}")
        got_x, got_w, got_b = found
        for name, got, want in (("grad_weight_shards", got_w, want_w), ("grad_bias_shards", got_b, want_b)):
            if not isinstance(got, (list, tuple)) or len(got) != len(want):
                raise grading.Wrong(f"{what}: {name} must be a list of one tensor per rank ({len(want)}), "
                                    f"found {feedback.describe(got)}")
        if (isinstance(got_x, torch.Tensor) and got_x.shape == want_x.shape and got_x.dtype == want_x.dtype
                and len(ws) > 1):
            partials = [g @ w for g, w in zip(gs, ws)]
            if any(torch.allclose(got_x, p, rtol=1e-5, atol=1e-5) for p in partials):
                raise grading.Wrong(f"{what}: grad_input is one rank's partial product: the ranks' "
                                    "partials must be summed (the all-reduce of the backward pass)")
            if torch.allclose(got_x, want_x / len(ws), rtol=1e-5, atol=1e-5):
                raise grading.Wrong(f"{what}: grad_input is the mean of the ranks' partials; the "
                                    "all-reduce of the backward pass sums them")
        feedback.tensor(got_x, want_x, f"{what}: grad_input", rtol=1e-5, atol=1e-5)
        for r, (g, want) in enumerate(zip(got_w, want_w)):
            feedback.tensor(g, want, f"{what}: rank {r}'s grad_weight shard", rtol=1e-5, atol=1e-5)
        for r, (g, want) in enumerate(zip(got_b, want_b)):
            feedback.tensor(g, want, f"{what}: rank {r}'s grad_bias shard", rtol=1e-5, atol=1e-5)


COLUMN_HINT = """Rank r computed y_r = x W_r^T + b_r from the whole x. Its weight and bias gradients
need only its own grad_out_r (flatten the token dimensions first: every token contributes). x fed
every rank, so its gradient collects a partial product grad_out_r W_r from each rank: what does the
backward of copy_to_tp_region do with them? Mind shards of different sizes."""


@grading.exercise("09.column_backward", cases=column_cases, hint=COLUMN_HINT)
def column_backward(fn) -> None:
    """fn(x, weight_shards, grad_out_shards) -> (grad_input, grad_weight_shards, grad_bias_shards)."""
    judge_column_backward(fn, column_cases())


# ---- 09.interleaved_bubble ----------------------------------------------------------------------

BUBBLE_P, BUBBLE_M, BUBBLE_V = 5, 10, 2
# The causes offered in the notebook (which one is right only instructor/hidden_checks/nb09.py knows).
WHY_CHOICES = {
    "a": "each forward and backward step lasts 1/v as long, so filling and draining the pipeline "
         "(p-1 steps each way) takes 1/v of the time while the useful work stays the same",
    "b": "the messages between stages are free in the simulation only when the model is cut in chunks",
    "c": "each micro-batch is cut into v smaller micro-batches, so there are v times more of them",
    "d": "each rank holds fewer activations, so its steps run faster",
}


def _real(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise grading.Wrong(f"{name}: expected a finite number, found {feedback.describe(value)}")
    return float(value)


BUBBLE_HINT = """Simulate the schedule with schedules.simulate("interleaved", p, m, v) and read the
idle fraction with schedules.bubble_of and rank 0's most activations with schedules.peak_in_flight.
For the why: compare how long the warm-up and the cool-down last with and without chunks, and what
stays the same (each rank still runs m forwards and m backwards of its whole share of the model)."""


@grading.exercise("09.interleaved_bubble", hint=BUBBLE_HINT, later="WHY", keyed="BUBBLE and PEAK_RANK0")
def interleaved_bubble(predicted, bubble, peak, why) -> None:
    """predicted: PREDICTED_BUBBLE (recorded, not graded); bubble, peak: measured; why: a letter."""
    wrong = feedback.Fields()
    with wrong.field():
        _real(predicted, "PREDICTED_BUBBLE (recorded, not graded)")
    with wrong.field():
        if not 0 <= _real(bubble, "BUBBLE") <= 1:
            raise grading.Wrong(f"BUBBLE: {bubble:.6g} is not a fraction between 0 and 1 (give a fraction, not a "
                                "percentage)")
    with wrong.field():
        if _real(peak, "PEAK_RANK0") < 0:
            raise grading.Wrong(f"PEAK_RANK0: {peak:.6g} is negative")
    with wrong.field():
        feedback.choice(why, "WHY", WHY_CHOICES)
    wrong.done()
    key = registry.key("09.interleaved_bubble")
    if key is None:
        return
    with wrong.field():
        feedback.number(bubble, key["bubble"], "BUBBLE: the idle fraction of the simulated interleaved schedule",
                        rel=1e-6)
    with wrong.field():
        feedback.number(peak, key["peak"], "PEAK_RANK0: the most activations rank 0 holds (in micro-batches of a "
                        "stage)", rel=1e-6)
    wrong.done()
