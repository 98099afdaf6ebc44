"""Exercise checks and the instructor's release/grade tools.

`check(exercise_id, *values)` runs the registered checker for that exercise. Checkers live in
`course_kit/grading/checks/nbNN.py` and are registered with `@exercise("NN.name")`.
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


def _load_checkers() -> None:
    from . import checks
    for info in pkgutil.iter_modules(checks.__path__):
        importlib.import_module(f"{checks.__name__}.{info.name}")


def check(exercise_id: str, *values: Any, **kwargs: Any) -> None:
    """Check a learner's answer: print a friendly pass, or raise AssertionError saying what differs."""
    if exercise_id not in _CHECKERS:
        _load_checkers()
    if exercise_id not in _CHECKERS:
        raise ValueError(f"unknown exercise {exercise_id!r}; known: {sorted(_CHECKERS)}")
    _CHECKERS[exercise_id](*values, **kwargs)
    print(f"✅ Exercise {exercise_id}: passed.")
