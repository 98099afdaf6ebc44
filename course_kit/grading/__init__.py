"""Exercise checks and the instructor's release/grade tools.

`check(exercise_id, *values)` runs the registered checker for that exercise. Checkers live in
`course_kit/grading/checks/nbNN.py` and are registered with `@exercise("NN.name")`; a checker
raises AssertionError saying what was expected and what was found (see `expect`).

Instructor tools (not imported here, to keep `check` light): `release.release` writes the student
notebooks, `grade.grade` runs and grades submissions; `course-kit release|grade` wrap them.
"""
from __future__ import annotations

import importlib
import pkgutil
from typing import Any, Callable

_CHECKERS: dict[str, Callable[..., Any]] = {}


def exercise(exercise_id: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the checker for one exercise id, such as "01.bf16_round"."""
    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        _CHECKERS[exercise_id] = fn
        return fn
    return register


def _load_checkers(exercise_id: str | None = None) -> None:
    """Import checker modules: the exercise's own notebook module first (cheap), else all of them."""
    from . import checks
    if exercise_id and exercise_id[:2].isdigit():
        try:
            importlib.import_module(f"{checks.__name__}.nb{exercise_id[:2]}")
        except ModuleNotFoundError as exc:
            if not exc.name or not exc.name.endswith(f"nb{exercise_id[:2]}"):
                raise
        if exercise_id in _CHECKERS:
            return
    for info in pkgutil.iter_modules(checks.__path__):
        importlib.import_module(f"{checks.__name__}.{info.name}")


def expect(condition: bool, what: str, expected: Any, found: Any) -> None:
    """Raise AssertionError('<what>: expected <expected>, found <found>') unless condition holds."""
    if not condition:
        raise AssertionError(f"{what}: expected {expected}, found {found}")


def check(exercise_id: str, *values: Any, **kwargs: Any) -> None:
    """Check a learner's answer: print a friendly pass, or raise AssertionError saying what differs."""
    if exercise_id not in _CHECKERS:
        _load_checkers(exercise_id)
    if exercise_id not in _CHECKERS:
        raise ValueError(f"unknown exercise {exercise_id!r}; known: {sorted(_CHECKERS)}")
    _CHECKERS[exercise_id](*values, **kwargs)
    print(f"✅ Exercise {exercise_id}: passed.")
