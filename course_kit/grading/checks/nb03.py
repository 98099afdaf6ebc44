"""Checks for notebook 03 (torch.compile modes)."""
from __future__ import annotations

from typing import Any

import torch

from course_kit import grading
from course_kit.grading.checks import feedback
from course_kit.grading.checks.codec import Raised, raised


def reference(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """forward_with_branch without its print: what the fixed function must compute."""
    h = torch.relu(x @ w)
    if h.mean() > 1.0:
        h = h / h.mean()
    return h @ w.T


def _cases() -> list[tuple]:
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(16, 32, generator=g), torch.randn(32, 64, generator=g)
    return [(x, w), (x * 0.01, w)]  # mean activation above 1, then below 1


def probe(fixed: Any, cases: list) -> dict:
    """Runs where the learner's code lives: does it compile as one graph, and what does it return."""
    from course_kit.compile_modes.graphs import compiles_fullgraph
    try:
        ok, err = compiles_fullgraph(fixed, *cases[0])
    except Exception as exc:
        ok, err = False, f"{type(exc).__name__}: {exc}"
    outputs = []
    for args in cases:
        try:
            outputs.append(fixed(*args))
        except Exception as exc:
            outputs.append(raised(exc))
    return {"fullgraph": bool(ok), "error": str(err)[:300], "outputs": outputs}


HINT = """A Python `if` on a tensor's value makes dynamo break the graph (it must know the value to
pick a branch). Compute both branches and select with `torch.where(condition, a, b)`: the choice
becomes part of the graph. Drop the print, too."""


@grading.exercise("03.fullgraph", cases=_cases, probe="course_kit.grading.checks.nb03:probe", hint=HINT)
def check_fullgraph(answer) -> None:
    """`fixed(x, w)` must compile with fullgraph=True (no graph break) and compute what
    forward_with_branch computes, on inputs that take either side of its branch."""
    data = answer.data
    if not isinstance(data, dict) or not isinstance(data.get("outputs"), list) or \
            len(data["outputs"]) != len(answer.cases):
        raise grading.Wrong("the answer could not be probed: pass your function fixed(x, w)")
    for got in data["outputs"]:          # an error in the function itself comes first
        if isinstance(got, Raised):
            raise feedback.StudentRaised("fixed(x, w)", got)
    if data.get("fullgraph") is not True:
        raise grading.Wrong(f"fixed(x, w) does not compile with fullgraph=True: {str(data.get('error'))[:160]}")
    for (x, w), got in zip(answer.cases, data["outputs"]):
        mean = float(torch.relu(x @ w).mean())
        what = f"fixed(x, w) with a mean activation {'above' if mean > 1 else 'below'} 1"
        if isinstance(got, Raised):
            raise feedback.StudentRaised(what, got)
        feedback.tensor(got, reference(x, w), what, rtol=1e-5, atol=1e-5)
