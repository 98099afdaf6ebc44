"""Exercises of the grading self-test (there is no notebook 99): used by tests/test_grading*.py and
tests/test_hostile*.py, and a small example for instructors writing checks."""
from __future__ import annotations

from course_kit import grading
from course_kit.grading.checks import feedback


def _add_cases() -> list[tuple]:
    return [(2, 3), (-1, 1), (10, 32)]


@grading.exercise("99.add", cases=_add_cases, hint="Return the sum of the two arguments: `a + b`.")
def check_add(add) -> None:
    for a, b in _add_cases():
        got = add(a, b)
        grading.expect(got == a + b, f"add({a}, {b})", a + b, got)


@grading.exercise("99.square", hint="A list comprehension over range(5) that squares each number.")
def check_square(squares) -> None:
    expected = [i * i for i in range(5)]
    grading.expect(isinstance(squares, list), "squares", "a list", type(squares).__name__)
    grading.expect(len(squares) == 5, "squares: the length is wrong", 5, len(squares))
    grading.expect(squares == expected, "squares", expected, squares)


def _half_cases() -> list[tuple]:
    import torch
    g = torch.Generator().manual_seed(99)
    return [(torch.randn(3, 4, generator=g),), (torch.arange(6, dtype=torch.float32).reshape(2, 3),)]


@grading.exercise("99.half", cases=_half_cases,
                  hint="Multiply the tensor by 0.5; keep its shape and its floating-point dtype.")
def check_half(half) -> None:
    # The oracle is the course's own function (as real checks use lesson code); a learner who
    # replaces it in their kernel changes nothing here, since this runs in another process.
    from course_kit.grading.checks.oracles import halve
    for (x,) in _half_cases():
        feedback.tensor(half(x), halve(x), f"half(x) on {feedback.describe(x)}", rtol=1e-6, atol=0)
