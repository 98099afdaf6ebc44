"""A stand-in "lesson function" for the grading self-test (exercise 99.half): the oracle a hostile
test replaces inside the learner's kernel, to show that doing so changes no verdict."""
from __future__ import annotations


def halve(x):
    """x / 2, the reference of exercise 99.half."""
    return x * 0.5
