"""Hidden check of notebook 08: the Triton merge of two partial softmax states on shapes, seeds and
scales the public check (checks/nb08.py, which learners can read) never uses: a head dim of 128,
rows that leave the launcher's last program ragged, negative scores far below zero, a row whose
two parts have the same max, and empty parts mixed with scores near 300."""
from __future__ import annotations

from course_kit import grading
from course_kit.grading.checks import feedback
from course_kit.grading.checks.nb08 import CHOICES
from course_kit.grading.checks.nb08 import MERGE_HINT, judge_merge, merge_cases

HIDDEN_CASES = [
    ("a head dim of 128 and 33 rows (a ragged last program)", 33, 128, 20, 3, 0.0, None, (), ()),
    ("scores far below zero (around -250)", 16, 32, 6, 6, -250.0, 2.0, (), ()),
    ("the same scores in both parts (equal maxima)", 4, 8, 5, 5, 0.0, 0.0, (), ()),
    ("scores near 300 with empty parts on some rows", 24, 40, 9, 13, 300.0, None, (1, 2, 9), (2, 10, 11)),
]


def _cases() -> list[tuple]:
    cases = merge_cases(HIDDEN_CASES, seed=8080)
    m1, l1, acc1, *_ = cases[2]
    cases[2] = (m1, l1, acc1, m1.clone(), l1.clone(), acc1.clone())   # one part merged with a copy of itself
    return cases


@grading.exercise("08.merge_states_hidden", cases=_cases, hint=MERGE_HINT)
def merge_states_hidden(fn) -> None:
    judge_merge(fn, HIDDEN_CASES, _cases())


# ---- 08.causal_traffic: the multiple-choice part, kept out of the installed package ---
CAUSE_ANSWER = "C"   # both counts grow as S squared: see the options in the notebook's task


@grading.exercise("08.causal_traffic_hidden")
def causal_traffic_hidden(cause) -> None:
    found = feedback.choice(cause, "CAUSE", CHOICES)
    grading.expect(found == CAUSE_ANSWER, "CAUSE names the wrong reason", CAUSE_ANSWER, cause)


# ---- 08.causal_traffic: the answer key ---
# Tiles at S = 1950, BLOCK_M = 128, BLOCK_N = 64, causal: query blocks 0..14 end at row 128 i + 127 and
# need key blocks 0..2 i + 1 (2 i + 2 tiles: 240 in all); the ragged block 15 ends at row 1949 and
# needs key blocks 0..30 (31 tiles): 271. Ratios: io_complexity.standard_accesses / kernel_accesses at
# S = 2048 ... 16384 (d = 128); their limit: standard causal ~ 6 S^2, the kernel ~ d S^2 / BLOCK_M, so
# 6 x 128 / 128 = 6. tests/test_answer_keys.py computes them again.
grading.answer_key("08.causal_traffic", tiles=271,
                   ratios=[5.260994656802302, 5.59875027895559, 5.79036959309782, 5.892778340986344], limit=6.0)
