"""Exercises of the grading self-test (there is no notebook 99): used by tests/test_grading*.py and
as a small example for instructors writing checks."""
from __future__ import annotations

from course_kit import grading


@grading.exercise("99.add")
def check_add(add) -> None:
    grading.expect(callable(add), "add", "a function", type(add).__name__)
    for a, b in [(2, 3), (-1, 1), (10, 32)]:
        got = add(a, b)
        grading.expect(got == a + b, f"add({a}, {b})", a + b, got)


@grading.exercise("99.add_hidden")
def check_add_hidden(add) -> None:
    for a, b in [(0.5, 0.25), (10**12, 1)]:
        got = add(a, b)
        grading.expect(got == a + b, f"add({a}, {b})", a + b, got)


@grading.exercise("99.square")
def check_square(squares) -> None:
    expected = [i * i for i in range(5)]
    grading.expect(list(squares) == expected, "squares", expected, list(squares))
