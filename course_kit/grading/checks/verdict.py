"""The part of a check that decides: given the answer as data, run the checker. In grading this runs
in a process where no learner code ever ran (checks/judge.py); in a notebook it runs in-process on
the same data, so both give the same verdict.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from .codec import AnswerError, Opaque, Raised, encode
from .feedback import StudentRaised, Wrong, describe
from .registry import Spec


def key(args: tuple) -> str:
    """A canonical key for a tuple of arguments (tensors by dtype, shape and bytes)."""
    tree, arrays = encode(tuple(args))
    h = hashlib.sha256(json.dumps(tree, sort_keys=True).encode())
    for a in arrays:
        h.update(f"{a.dtype}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _args_text(args: tuple) -> str:
    return ", ".join(describe(a) if not isinstance(a, (int, float, str, bool)) else repr(a) for a in args)


class Replay:
    """Stands in for the learner's function in the checker: returns what it returned on each case."""

    def __init__(self, exercise_id: str, cases: list, results: Any, not_callable: bool = False):
        if not isinstance(results, list) or len(results) != len(cases):
            raise AnswerError(f"the answer holds {len(results) if isinstance(results, list) else 'no'} "
                              f"results for {len(cases)} inputs")
        self.exercise_id = exercise_id
        self._results: dict[str, Any] = {}
        for args, result in zip(cases, results):
            self._results.setdefault(key(tuple(args)), result)
        if not_callable:
            found = results[0] if results else Opaque("value")
            raise Wrong(f"expected a function (or class), found {found!r}")

    def __call__(self, *args: Any) -> Any:
        k = key(args)
        if k not in self._results:
            raise RuntimeError(f"checker of {self.exercise_id} called the answer on inputs it did not "
                               f"declare in its cases: ({_args_text(args)})")
        out = self._results[k]
        if isinstance(out, Raised):
            raise StudentRaised(f"on input ({_args_text(args)[:120]})", out)
        return out


@dataclass
class Probed:
    """What a custom probe recorded (see registry's `probe=`), with the cases it was given."""
    cases: list
    data: Any


def run(spec: Spec, answer: Any, source: str | None = None) -> None:
    """Run the checker of `spec` on a decoded answer; raise Wrong, StudentRaised or AnswerError."""
    if not isinstance(answer, dict):
        raise AnswerError("the answer is not a record of a check")
    values = answer.get("values", [])
    if not isinstance(values, list):
        raise AnswerError("the answer's values are not a list")
    kwargs = {"source": source or ""} if spec.source else {}
    if spec.cases is None:
        spec.checker(*values, **kwargs)
        return
    cases = [tuple(c) for c in spec.cases()]
    if spec.probe:
        first: Any = Probed(cases, answer.get("probe"))
    else:
        first = Replay(spec.id, cases, answer.get("results"), bool(answer.get("not_callable")))
    spec.checker(first, *values, **kwargs)


def outcome(spec: Spec, answer: Any, source: str | None = None, level: str = "short") -> tuple[str, str]:
    """('passed' | 'failed' | 'error', one-line message) for an answer."""
    try:
        run(spec, answer, source)
    except Wrong as w:
        return "failed", _line(w.render(level))
    except StudentRaised as e:
        return "error", _line(str(e))
    except AnswerError as e:
        return "error", _line(f"the answer could not be read: {e}")
    except RecursionError:
        return "failed", "the answer could not be checked: it is nested too deeply"
    except Exception as e:  # the answer has a shape the checker did not expect
        return "failed", _line(f"the answer could not be checked ({type(e).__name__}: {e})")
    return "passed", "all checks passed"


def _line(text: str, limit: int = 400) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
