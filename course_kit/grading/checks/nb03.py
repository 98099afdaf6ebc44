"""Checks for notebook 03 (torch.compile modes).

- 03.fullgraph: rewrite forward_with_branch so that it compiles with fullgraph=True.
- 03.recompiles: predict, then measure with compile_modes.count_compiles, how many graphs Dynamo
  compiles on each call of a function with a graph break over a sequence of shapes; then explain
  the one recompile that a changed batch size does not explain. The counts are the instructor's
  answer key (instructor/hidden_checks/nb03.py); this package checks their form.
"""
from __future__ import annotations

from typing import Any

import torch

from course_kit import grading
from course_kit.grading.checks import feedback, registry
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


# ---- 03.recompiles ------------------------------------------------------------------------------

SHAPES = [(8, 64), (8, 64), (16, 64), (24, 64), (24, 32), (40, 32)]
WHY_CHOICES = "ABCD"   # which one is right only the hidden checker knows (instructor/hidden_checks/nb03.py)


def two_graphs(x: torch.Tensor) -> torch.Tensor:
    """The exercise's function, as the notebook defines it (a test keeps the two the same)."""
    h = torch.tanh(x @ x.T)
    torch._dynamo.graph_break()      # stands for a print or a Python `if` on a tensor's value
    return (h @ x).softmax(-1)


RECOMPILE_HINT = """Measure with the function behind section 5's figure: cm.count_compiles(two_graphs,
SHAPES, "automatic")["compiled_on_call"], and its "compiles" with "static". A graph break splits the
function into two graphs, each guarded and compiled on its own. To explain call 5, compare its shape
with the shapes before it, dimension by dimension."""


def _ints(found, what: str, n: int | None = None) -> list:
    if not (isinstance(found, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in found)):
        raise grading.Wrong(f"{what}: expected a list of ints, found {feedback.describe(found)}")
    if n is not None and len(found) != n:
        raise grading.Wrong(f"{what}: expected {n} numbers (one per call), found {len(found)}")
    return list(found)


@grading.exercise("03.recompiles", hint=RECOMPILE_HINT, later="WHY", keyed="PER_CALL and STATIC_TOTAL")
def recompiles(predicted, per_call, static_total, why) -> None:
    """predicted: graphs compiled per call, guessed before measuring (recorded, not graded);
    per_call: measured, automatic dynamic; static_total: measured total with dynamic=False; why: a letter."""
    wrong = feedback.Fields()
    with wrong.field():
        _ints(predicted, "PREDICTED (recorded, not graded)", len(SHAPES))
    with wrong.field():
        found = _ints(per_call, "PER_CALL", len(SHAPES))
    with wrong.field():
        if isinstance(static_total, bool) or not isinstance(static_total, int):
            raise grading.Wrong(f"STATIC_TOTAL: expected an int, found {feedback.describe(static_total)}")
    with wrong.field():
        feedback.choice(why, "WHY", WHY_CHOICES)
    wrong.done()
    want = registry.key("03.recompiles")
    if want is None:
        return
    with wrong.field():
        bad = [i for i, (f, w) in enumerate(zip(found, want["per_call"])) if f != w]
        if bad:
            raise grading.Wrong(f"PER_CALL: {len(bad)} of {len(SHAPES)} calls are wrong, the first is call "
                                f"{bad[0] + 1} (shape {SHAPES[bad[0]]}, you said {found[bad[0]]})",
                                expected=want["per_call"])
    with wrong.field():
        grading.expect(static_total == want["static_total"],
                       "STATIC_TOTAL: that is not the number of graphs dynamic=False compiles", want["static_total"],
                       static_total)
    wrong.done()
