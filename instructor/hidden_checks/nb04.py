"""Hidden check of notebook 04 (example): exported from an input that takes the *other* branch, then
probed on a peak of exactly 1, all zeros and new batch sizes."""
from __future__ import annotations

import torch

from course_kit import grading
from course_kit.grading.checks import feedback
from course_kit.grading.checks.nb04 import TRAP_CAUSES
from course_kit.grading.checks.nb04 import batches, judge


def _probes() -> dict[str, torch.Tensor]:
    edge = torch.full((3, 8), 0.5)
    edge[1, 2] = -1.0  # a peak of exactly 1: not above 1, so doubled
    return {**batches(4, 9), "peak exactly 1": edge, "all zeros": torch.zeros(2, 8)}


def _cases() -> list[tuple]:
    return [("export", batches(3, 5)["peak below 1 (batch 5)"])] + [("program", x) for x in _probes().values()]


@grading.exercise("04.exportable_hidden", cases=_cases, instantiate=True,
                  probe="course_kit.grading.checks.nb04:probe")
def check_exportable_hidden(answer) -> None:
    judge(answer, {i + 1: name for i, name in enumerate(_probes())})


# ---- 04.silent_trap: the multiple-choice part, kept out of the installed package ---
CAUSE_ANSWER = "B"   # a Python number read at capture time becomes a constant of the graph


@grading.exercise("04.silent_trap_hidden")
def silent_trap_hidden(cause) -> None:
    found = feedback.choice(cause, "CAUSE", TRAP_CAUSES)
    grading.expect(found == CAUSE_ANSWER, "CAUSE: that is not why the silently wrong captures are wrong",
                   CAUSE_ANSWER, cause)


# ---- 04.silent_trap: the answer key ---
# What capture.probe(method, counter_trap()).status measures for each capture method on the counter
# trap (a module whose output reads a Python counter it increments): fx and export read the counter
# once, at capture, and keep its value as a constant (silently wrong; the hidden CAUSE letter says so).
# tests/test_answer_keys.py measures all four again.
grading.answer_key("04.silent_trap", measured={"jit.trace": "refused", "jit.script": "correct",
                                               "fx": "silently wrong", "export": "silently wrong"})
