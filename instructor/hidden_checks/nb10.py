"""Hidden check of notebook 10: which letter of 10.first_rung's multiple-choice part is right.
The public check (course_kit/grading/checks/nb10.py, which learners can read) checks its form only."""
from __future__ import annotations

from course_kit import grading
from course_kit.grading.checks import feedback
from course_kit.grading.checks.nb10 import RUNG_CHOICES

# ---- 10.first_rung: the multiple-choice part, kept out of the installed package ---
WHY_ANSWER = "a"   # a static batch runs until its longest request is done: padding and waiting


@grading.exercise("10.first_rung_hidden")
def first_rung_hidden(why) -> None:
    found = feedback.choice(why, "WHY", RUNG_CHOICES)
    grading.expect(found == WHY_ANSWER, "WHY: that is not why the engine needs fewer forward passes here",
                   WHY_ANSWER, why)


# ---- 10.first_rung: the answer key ---
# HF generate in static batches of 4 runs each batch to its longest output (one prefill and
# longest - 1 decodes): max(3, 40, 6, 33) + max(2, 38, 5, 30) = 40 + 38 = 78 forward passes. The
# engine, 4 slots and 64 tokens a step, takes 43 steps (counted with the engine; tests/test_answer_keys.py
# counts them again, and HF's forwards with a hook).
grading.answer_key("10.first_rung", hf_forwards=78, engine_steps=43)
