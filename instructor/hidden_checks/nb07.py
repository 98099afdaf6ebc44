"""Hidden check of notebook 07: async_bound on other seeded timelines, with a host that gets faster
in async (slowdown below 1) and one that gets much slower."""
from __future__ import annotations

from course_kit import grading
from course_kit.grading.checks.nb07 import bound_cases, judge_bound


def _named():
    return [(name.replace("random", "hidden"), spans, slowdown * (0.5 if i % 2 else 3.0))
            for i, (name, spans, slowdown) in enumerate(bound_cases(seed=77)[7:])]


@grading.exercise("07.async_bound_hidden", cases=lambda: [(s, d) for _, s, d in _named()])
def async_bound_hidden(fn) -> None:
    judge_bound(fn, _named())
