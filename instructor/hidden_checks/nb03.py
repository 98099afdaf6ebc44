"""Hidden check of notebook 03: which letter of 03.recompiles's multiple-choice part is right.
The public check (course_kit/grading/checks/nb03.py, which learners can read) checks its form only."""
from __future__ import annotations

from course_kit import grading
from course_kit.grading.checks import feedback
from course_kit.grading.checks.nb03 import WHY_CHOICES


# ---- 03.recompiles: the multiple-choice part, kept out of the installed package ---
WHY_ANSWER = "A"   # dim 1 changed: automatic dynamic had made only dim 0 (the one that changed) symbolic


@grading.exercise("03.recompiles_hidden")
def recompiles_hidden(why) -> None:
    found = feedback.choice(why, "WHY", WHY_CHOICES)
    grading.expect(found == WHY_ANSWER, "WHY names the wrong reason for call 5's compiles",
                   WHY_ANSWER, why)
