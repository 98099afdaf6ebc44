"""Hidden checks of the grading self-test (example): inputs the learner's notebook never shows.

Hidden checkers live here, in the instructor's tree, never in the installed package: the sandbox
cannot read them and learners cannot `inspect.getsource` them. They register like public ones.
"""
from __future__ import annotations

from course_kit import grading


def _cases() -> list[tuple]:
    return [(0.5, 0.25), (10**12, 1), (-7, -8)]


@grading.exercise("99.add_hidden", cases=_cases)
def check_add_hidden(add) -> None:
    for a, b in _cases():
        got = add(a, b)
        grading.expect(got == a + b, f"add on a hidden input ({type(a).__name__}s)", a + b, got)


@grading.exercise("99.square_hidden")
def check_square_hidden(squares) -> None:
    grading.expect(isinstance(squares, list) and all(type(v) is int for v in squares),
                   "squares: every item must be an int", "ints", squares)
