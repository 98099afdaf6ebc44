"""Hidden check of notebook 07: async_bound on other seeded timelines, with a host that gets faster
in async (slowdown below 1) and one that gets much slower."""
from __future__ import annotations

from course_kit import grading
from course_kit.grading.checks import feedback
from course_kit.grading.checks.nb07 import CAUSES
from course_kit.grading.checks.nb07 import bound_cases, judge_bound


def _named():
    return [(name.replace("random", "hidden"), spans, slowdown * (0.5 if i % 2 else 3.0))
            for i, (name, spans, slowdown) in enumerate(bound_cases(seed=77)[7:])]


@grading.exercise("07.async_bound_hidden", cases=lambda: [(s, d) for _, s, d in _named()])
def async_bound_hidden(fn) -> None:
    judge_bound(fn, _named())


# ---- 07.overlap_predict: the multiple-choice part, kept out of the installed package ---
CAUSE_ANSWER = "C"   # the first preparation overlaps nothing: the pipeline fills once


@grading.exercise("07.overlap_predict_hidden")
def overlap_predict_hidden(cause) -> None:
    found = feedback.choice(cause, "CAUSE", CAUSES)
    grading.expect(found == CAUSE_ANSWER, "CAUSE: that is not why the speed-up falls short of the bound",
                   CAUSE_ANSWER, cause)
