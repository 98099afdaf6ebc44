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


# ---- 03.recompiles: the answer key ---
# Two graphs (the graph break cuts the function in two), shapes (8, 64) (8, 64) (16, 64) (24, 64)
# (24, 32) (40, 32). Automatic dynamic: call 1 compiles both graphs statically (2); call 2 is the same
# shape (0); call 3 changes dim 0: both recompile with dim 0 dynamic (2); call 4 only changes dim 0 (0);
# call 5 changes dim 1: both recompile once more (2); call 6 (0). dynamic=False: 5 distinct shapes x 2
# graphs = 10. (tests/test_answer_keys.py counts them with compile_modes.count_compiles.)
grading.answer_key("03.recompiles", per_call=[2, 0, 2, 0, 2, 0], static_total=10)
