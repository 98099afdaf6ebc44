"""Exercise checks (every notebook's exercises) and, apart, the instructor's tools.

In a notebook, `check("NN.name", answer, ...)` gives feedback at once: a pass line, or one or two
lines saying what is wrong (raised as `CheckFailed`, shown without a traceback); `hint("NN.name")`
prints the exercise's hint. The checker runs on the answer *as data* (checks/codec.py), exactly as
when grading.

When grading (the sandbox sets COURSE_KIT_GRADE), `check` decides nothing: it writes the answer as
data for the grader, whose checkers run in another process where no learner code ever ran.

Layout: `checks/` holds the checkers and their machinery (they may use lesson code as an oracle);
`instructor/` holds the tools (release, grade, sandbox), which never import lessons; `ipython.py`
turns a check cell run before its exercise is answered into one line; nbbuild builds the learner's
notebooks with the instructor's release_notebook and cell helpers.

The values a student is graded on live in the instructor's tree (`answer_key`), never here: see
checks/registry.py.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

from .checks.feedback import CheckFailed, Wrong, expect
from .checks.registry import SPECS as _SPECS
from .checks.registry import answer_key, exercise

__all__ = ["check", "hint", "exercise", "answer_key", "expect", "Wrong", "CheckFailed"]

GRADE_ENV = "COURSE_KIT_GRADE"


def hint(exercise_id: str) -> None:
    """Print the hint written for this exercise."""
    from .checks import registry
    spec = registry.get(exercise_id)
    print(f"Hint for {exercise_id}: {spec.hint or 'no hint for this exercise.'}")


def _source_of(value: Any) -> str:
    import inspect
    try:
        return inspect.getsource(value)
    except (OSError, TypeError):
        return ""


def _plan(spec: Any) -> dict:
    return {"cases": None if spec.cases is None else [tuple(c) for c in spec.cases()],
            "instantiate": spec.instantiate, "probe": spec.probe}


def _record(exercise_id: str, values: tuple, folder: Path) -> None:
    """Grading: write this check's answer as data (the grader judges it elsewhere)."""
    from .checks import codec, probing, registry
    if not (isinstance(exercise_id, str) and registry.ID.match(exercise_id)):
        raise ValueError(f"exercise id must look like 'NN.name', got {exercise_id!r}")
    plan = codec.read(folder / "cases" / exercise_id)
    try:
        answer = probing.probe(plan, values)
        codec.write(folder / "answers" / exercise_id, answer)
    except codec.AnswerError as exc:
        codec.write(folder / "answers" / exercise_id, {"unreadable": str(exc)})
    print(f"Exercise {exercise_id}: answer recorded for grading.")


NOT_INSTALLED = "hidden check: the instructor's checks are not installed here"


def check(exercise_id: str, *values: Any, **kwargs: Any) -> None:
    """Check a learner's answer: print a pass line, or raise CheckFailed saying what is wrong. A hidden
    check (`NN.name_hidden`) runs where the instructor's tree is at hand (a checkout's
    instructor/hidden_checks/); elsewhere it says so in one line and passes on."""
    grade_dir = os.environ.get(GRADE_ENV)
    if grade_dir:
        _record(exercise_id, values, Path(grade_dir))
        return
    from .checks import codec, probing, registry, verdict
    if registry.is_hidden(exercise_id) and exercise_id not in _SPECS and registry.instructor_folder() is None:
        print(NOT_INSTALLED)
        return
    spec = registry.get(exercise_id)
    if kwargs:
        raise TypeError(f"check() takes the answer as positional values, got keywords {sorted(kwargs)}")
    answer = codec.roundtrip(probing.probe(_plan(spec), values))
    source = _source_of(values[0]) if spec.source and values else None
    status, message = verdict.outcome(spec, answer, source)
    if status != "passed":
        raise CheckFailed(exercise_id, message)
    print(f"✅ Exercise {exercise_id}: passed.{_later(spec)}")


def _later(spec: Any) -> str:
    """What the pass line says is judged only when the instructor grades."""
    from .checks import registry
    parts = [p for p in (spec.later, spec.keyed if spec.keyed and registry.key(spec.id) is None else "") if p]
    if not parts:
        return ""
    what = " and ".join(parts)
    verb = "are" if len(parts) > 1 or " and " in what or "," in what else "is"
    return f" {what} {verb} judged when your instructor grades the notebook."


def checkers() -> dict[str, Callable[..., Any]]:
    """Every public checker by id (loads all checker modules)."""
    from .checks import registry
    registry.load_public()
    return {k: s.checker for k, s in _SPECS.items()}


from .ipython import install as _install_answer_first   # noqa: E402 - after check, which it names

_install_answer_first()
