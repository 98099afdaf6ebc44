"""Hidden check of notebook 09: the column-parallel backward on rank counts and shapes the public
check (checks/nb09.py, which learners can read) never uses: 8 ranks, shards of one row
beside shards of two, an input of one feature, and many token dimensions."""
from __future__ import annotations

from course_kit import grading
from course_kit.grading.checks import feedback
from course_kit.grading.checks.nb09 import WHY_CHOICES, COLUMN_HINT, column_cases, judge_column_backward

# (leading shape of the tokens, in features, out features, ranks)
HIDDEN_SHAPES = [((3, 1, 2), 1, 9, 8), ((6,), 12, 11, 8), ((1,), 7, 6, 5), ((2, 5), 24, 40, 8)]


def _cases() -> list[tuple]:
    return column_cases(HIDDEN_SHAPES, seed=90909)


@grading.exercise("09.column_backward_hidden", cases=_cases, hint=COLUMN_HINT)
def column_backward_hidden(fn) -> None:
    judge_column_backward(fn, _cases())


# ---- 09.interleaved_bubble: the multiple-choice part, kept out of the installed package ---
WHY_ANSWER = "a"   # the fill and drain take 1/v of the time; the useful work stays the same


@grading.exercise("09.interleaved_bubble_hidden")
def interleaved_bubble_hidden(why) -> None:
    found = feedback.choice(why, "WHY", WHY_CHOICES)
    grading.expect(found == WHY_ANSWER, "WHY: that is not why interleaving shrinks the bubble here", WHY_ANSWER, why)


# ---- 09.interleaved_bubble: the answer key ---
# p = 5 stages, m = 10 micro-batches, v = 2 chunks: the bubble is (p - 1) / (v m + p - 1) = 4 / 24;
# rank 0 holds at most 7 micro-batches' activations (schedules.simulate and peak_in_flight;
# tests/test_answer_keys.py measures both again).
grading.answer_key("09.interleaved_bubble", bubble=1 / 6, peak=7.0)
