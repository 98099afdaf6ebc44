"""Hidden check of notebook 07: async_bound on other seeded timelines, with a host that gets faster
in async (slowdown below 1) and one that gets much slower; the answer key of 07.overlap_predict."""
from __future__ import annotations

from course_kit import grading
from course_kit.grading.checks import feedback
from course_kit.grading.checks.nb07 import CAUSES
from course_kit.grading.checks.nb07 import judge_bound, random_bound_cases

# The async wall times of the six timelines below, replayed event by event when they were frozen
# (tests/test_exercises_nb04_07.py replays them again).
HIDDEN_WALLS = [0.026181791443622638, 0.003359880217357669, 0.018204523248439665, 0.0032115016043273046,
                0.014443485835568114, 0.0026218796491351394]


def _named():
    return [(name.replace("random", "hidden"), spans, slowdown * (0.5 if i % 2 else 3.0), wall)
            for i, (name, spans, slowdown, wall) in enumerate(random_bound_cases(77, HIDDEN_WALLS))]


@grading.exercise("07.async_bound_hidden", cases=lambda: [(s, d) for _, s, d, _ in _named()])
def async_bound_hidden(fn) -> None:
    judge_bound(fn, _named())


# ---- 07.overlap_predict: the answer key ---
# Derived by hand from the two timelines of the task (10 steps; ms):
# - sync: step k is 0.6 of host work then 1.0 on the GPU, from 1.6 k: window 16, GPU busy 10, host 6;
#   GPU idle 1 - 10 / 16 = 0.375; bound = window / busiest lane = 16 / 10 = 1.6.
# - async: GPU steps back to back from 0.75 to 10.75 (busy 10), the host's 0.75 ms preparations
#   inside that window from 0: window 10.75; GPU idle 0.75 / 10.75 = 3 / 43; speed-up 16 / 10.75 = 64 / 43.
grading.answer_key("07.overlap_predict", idle_sync=0.375, idle_async=3 / 43, bound=1.6, speedup=64 / 43)

# ---- 07.overlap_predict: the multiple-choice part, kept out of the installed package ---
CAUSE_ANSWER = "C"   # the first preparation overlaps nothing: the pipeline fills once


@grading.exercise("07.overlap_predict_hidden")
def overlap_predict_hidden(cause) -> None:
    found = feedback.choice(cause, "CAUSE", CAUSES)
    grading.expect(found == CAUSE_ANSWER, "CAUSE: that is not why the speed-up falls short of the bound",
                   CAUSE_ANSWER, cause)
