"""Feedback of every exercise check: one or two lines saying what is wrong and on which kind of input.

Checkers raise `Wrong(message, expected=...)`: the message names the input and what is wrong with
the answer (its type, shape or dtype when that is the problem); the expected value is kept apart
and shown only with `--feedback full` (the instructor's choice), never in a learner's notebook.
In a notebook the failure is `CheckFailed`, whose traceback IPython does not print.
"""
from __future__ import annotations

import math
from typing import Any

LEVELS = ("short", "full")


class Wrong(AssertionError):
    """A wrong answer: what is wrong (shown), and the expected value (shown only in full feedback)."""

    def __init__(self, message: str, expected: Any = None):
        super().__init__(message)
        self.message, self.expected = message, expected

    def render(self, level: str = "short") -> str:
        if level == "full" and self.expected is not None:
            return f"{self.message} (expected {_short_repr(self.expected)})"
        return self.message


class Fields:
    """Every wrong field of an answer, reported together: each check runs in `with fields.field():`;
    `done()` raises one Wrong whose message names every wrong field (in order, "; " between them) and
    whose expected value (full feedback only) holds each field's.

        wrong = Fields()
        with wrong.field():
            number(found, want, "BOUND")
        ...
        wrong.done()
    """

    def __init__(self) -> None:
        self.wrong: list[Wrong] = []

    def field(self) -> "_Field":
        return _Field(self)

    def done(self) -> None:
        if len(self.wrong) == 1:
            raise self.wrong[0]
        if self.wrong:
            raise Wrong("; ".join(w.message for w in self.wrong), expected=_Parts(self.wrong))


class _Field:
    def __init__(self, fields: Fields):
        self.fields = fields

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, value, tb) -> bool:
        if isinstance(value, Wrong):
            self.fields.wrong.append(value)
            return True
        return False


class _Parts:
    """The expected values of several wrong fields (full feedback shows them one by one)."""

    def __init__(self, wrong: list[Wrong]):
        self.parts = [w.expected for w in wrong]

    def __repr__(self) -> str:
        return "; ".join(_short_repr(p) for p in self.parts)


class StudentRaised(Exception):
    """The learner's function raised while the checker probed it."""

    def __init__(self, what: str, raised: Any):
        super().__init__(f"{what}: your code raised {raised!r}")
        self.raised = raised


class CheckFailed(AssertionError):
    """A failed check in a notebook: IPython shows these lines only, not a traceback."""

    def __init__(self, exercise_id: str, message: str):
        super().__init__(f"Exercise {exercise_id}: {message}")
        self.exercise_id, self.message = exercise_id, message

    def _render_traceback_(self) -> list[str]:   # IPython's hook: replaces the traceback
        return [f"\x1b[31m✗ Exercise {self.exercise_id}: {self.message}\x1b[0m",
                f"  (grading.hint({self.exercise_id!r}) gives a hint)"]


def _short_repr(value: Any, limit: int = 160) -> str:
    torch = _torch()
    if torch is not None and isinstance(value, torch.Tensor):
        flat = value.flatten()[:4].tolist()
        text = f"tensor{tuple(value.shape)} {value.dtype} starting {flat}"
    elif isinstance(value, float):
        text = f"{value:.6g}"
    else:
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _torch() -> Any:
    import sys
    return sys.modules.get("torch")


def describe(value: Any) -> str:
    """A kind-of-value description for messages: 'a tensor of shape (4, 8) and dtype torch.int64'."""
    torch = _torch()
    if torch is not None and isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)} and dtype {value.dtype}"
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__} of {len(value)} items"
    if isinstance(value, dict):
        return f"a dict of {len(value)} entries"
    if value is None:
        return "None"
    return f"a value of type {type(value).__name__}"


def expect(condition: bool, what: str, expected: Any, found: Any) -> None:
    """Raise Wrong('<what>: found <found>') unless condition holds; `expected` shows in full feedback."""
    if not condition:
        raise Wrong(f"{what}: found {_short_repr(found)}", expected=expected)


def choice(found: Any, what: str, choices: Any = "ABCD") -> str:
    """A multiple-choice answer, checked for form only: one of the letters (`choices`: a string of
    letters or a dict keyed by them; case and spaces do not matter), returned in the choices' case.
    Which letter is right is a hidden checker's business (registry: `later=`)."""
    letters = "".join(choices)
    key = found.strip().upper() if isinstance(found, str) else ""
    if len(key) != 1 or key not in letters.upper():
        shown = repr(found)[:60] if isinstance(found, str) else describe(found)
        raise Wrong(f"{what}: expected one of the letters {', '.join(map(repr, letters))}, found {shown}")
    return key if letters.isupper() else key.lower()


def number(found: Any, want: float, what: str, rel: float = 1e-9, abs_: float = 0.0) -> None:
    """A real number within `rel` of `want` (and a number at all)."""
    if isinstance(found, bool) or not isinstance(found, (int, float)):
        raise Wrong(f"{what}: expected a number, found {describe(found)}", expected=want)
    if not math.isclose(found, want, rel_tol=rel, abs_tol=abs_):
        raise Wrong(f"{what}: {found:.6g} is not within {rel * 100:g}% of the right value", expected=want)


def tensor(found: Any, want: Any, what: str, rtol: float = 1e-6, atol: float = 1e-6,
           exact: bool = False, dtype: bool = True) -> None:
    """`found` must be a tensor of want's shape (and dtype) holding want's values: the message says
    which of type, shape, dtype or values is wrong."""
    import torch
    if not isinstance(found, torch.Tensor):
        raise Wrong(f"{what}: expected a tensor, found {describe(found)}", expected=want)
    if tuple(found.shape) != tuple(want.shape):
        raise Wrong(f"{what}: the shape is wrong: found {tuple(found.shape)}, expected {tuple(want.shape)}")
    if dtype and found.dtype != want.dtype:
        raise Wrong(f"{what}: the dtype is wrong: found {found.dtype}, expected {want.dtype}")
    a, b = found.detach().to(torch.float64), want.detach().to(torch.float64)
    # NaN: a NaN matches a NaN where the right value is NaN too (NaN means "no number here" in both,
    # e.g. a NaN input passed through), and nothing else; a NaN where the right value is a number,
    # or a number where it is NaN, is wrong, whether exact or within tolerance.
    if exact:
        same = (a == b) | (a.isnan() & b.isnan())
    else:
        same = torch.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
    if not bool(same.all()):
        bad = int((~same).sum())
        nan = int((a.isnan() & ~b.isnan()).sum())
        if nan:
            raise Wrong(f"{what}: {bad} of {same.numel()} values are wrong, {nan} of them NaN where the right "
                        "value is a number", expected=want)
        diff = (a - b).abs()
        worst = float(diff[~same].nan_to_num(float("inf")).max())
        raise Wrong(f"{what}: {bad} of {same.numel()} values are wrong "
                    f"(largest difference {worst:.3g})", expected=want)
