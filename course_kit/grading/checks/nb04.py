"""Checks of notebook 04 (graph capture): make a module exportable.

The probe (run where the learner's code lives) calls the module eagerly, exports it with a dynamic
batch dimension from an example, and runs the exported program; the checker compares every output
with ClipOrScale, the lesson's module, in its own process.
"""
from __future__ import annotations

from typing import Any

import torch

from course_kit import grading
from course_kit.grading.checks import feedback, registry
from course_kit.grading.checks.codec import Raised


def _export(module: Any, example: torch.Tensor) -> Any:
    from torch.export import Dim
    return torch.export.export(module, (example,), dynamic_shapes=({0: Dim("batch")},))


def probe(module: Any, cases: list) -> list:
    """cases: ("eager", x) calls the module; ("export", x) exports it from example x; ("program", x)
    runs the last exported program. One result per case: an output, True for an export, or Raised."""
    out: list = []
    program = None
    for kind, x in cases:
        try:
            if kind == "eager":
                out.append(module(x))
            elif kind == "export":
                program = _export(module, x).module()
                out.append(True)
            elif program is None:
                out.append(Raised("RuntimeError", "the module did not export"))
            else:
                out.append(program(x))
        except Exception as exc:
            first = next((line for line in str(exc).splitlines() if line.strip()), "")
            out.append(Raised(type(exc).__name__, first[:200]))
    return out


def batches(seed: int, batch: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {f"peak below 1 (batch {batch})": torch.rand(batch, 8, generator=gen) * 0.9,
            f"peak above 1 (batch {batch})": torch.randn(batch, 8, generator=gen) * 3 + 0.5}


def _cases() -> list[tuple]:
    eager = [("eager", x) for x in batches(0, 4).values()]
    return eager + [("export", batches(1, 4)["peak above 1 (batch 4)"])] + \
        [("program", x) for x in batches(2, 6).values()]


def judge(answer: Any, names: dict[int, str]) -> None:
    """Compare every probed output with ClipOrScale's; `names` labels the cases by index."""
    from course_kit.capture.methods import ClipOrScale
    reference = ClipOrScale()
    results = answer.data
    if not isinstance(results, list) or len(results) != len(answer.cases):
        raise grading.Wrong("the answer could not be probed: pass your nn.Module class or instance")
    for i, ((kind, x), got) in enumerate(zip(answer.cases, results)):
        if kind == "export":
            if isinstance(got, Raised):
                raise grading.Wrong(f"torch.export.export(module, (x,), dynamic_shapes=({{0: Dim('batch')}},)) "
                                    f"fails: {got!r}")
            continue
        what = f"{'eager' if kind == 'eager' else 'exported program'} output, {names.get(i, 'input')}"
        if isinstance(got, Raised):
            raise feedback.StudentRaised(what, got)
        feedback.tensor(got, reference(x), what, rtol=1e-5, atol=1e-6)


HINT = """torch.export traces with symbolic values, so a Python `if peak > 1` cannot be decided.
Keep both branches in the graph: `torch.cond(pred, true_fn, false_fn, operands)` or
`torch.where(pred, x / peak, x * 2)`. Test it with torch.export.export and a Dim for the batch."""


@grading.exercise("04.exportable", cases=_cases, instantiate=True,
                  probe="course_kit.grading.checks.nb04:probe", hint=HINT)
def check_exportable(answer) -> None:
    names = {}
    labels = list(batches(0, 4)) + ["export"] + list(batches(2, 6))
    for i, label in enumerate(labels):
        names[i] = label
    judge(answer, names)


# ---- 04.silent_trap: predict, measure and explain what each capture does to a module with state ----

def trap_case() -> Any:
    """The capture.Case of the trap, the one the notebook runs (course_kit.capture.traps)."""
    from course_kit.capture.traps import counter_trap
    return counter_trap()


STATUSES = ("correct", "silently wrong", "refused", "fails at run")
TRAP_CAUSES = "ABCD"   # which one is right only the hidden checker knows (instructor/hidden_checks/nb04.py)


def _status_dict(value: Any, what: str) -> dict:
    from course_kit.capture import methods as capture
    if not isinstance(value, dict):
        raise grading.Wrong(f"{what}: expected a dict {{method: status}}, found {feedback.describe(value)}")
    missing = [m for m in capture.METHODS if m not in value]
    if missing:
        raise grading.Wrong(f"{what}: give a status for every method; missing {missing}")
    bad = {m: v for m, v in value.items() if v not in STATUSES}
    if bad:
        m = next(iter(bad))
        raise grading.Wrong(f"{what}: the status of {m!r} must be one of {list(STATUSES)}, found {bad[m]!r}")
    return value


TRAP_HINT = """Record PREDICTED first. Then run `capture.probe(method, TRAP)` for each method in
`capture.METHODS` and keep `.status`. For the cause, look at what the captured program of fx or
export contains where eager reads `self.calls` (print `capture.ir_text(...)`): is the counter an
input of the graph, an operation of it, or something else?"""


@grading.exercise("04.silent_trap", hint=TRAP_HINT, later="CAUSE", keyed="MEASURED")
def check_silent_trap(predicted, measured, cause) -> None:
    """predicted, measured: {method: status}; cause: the letter of the explanation. What capture.probe
    measures is the instructor's answer key (instructor/hidden_checks/nb04.py)."""
    wrong = feedback.Fields()
    with wrong.field():
        _status_dict(predicted, "PREDICTED (your prediction, recorded but not graded)")
    with wrong.field():
        _status_dict(measured, "MEASURED")
    with wrong.field():
        feedback.choice(cause, "CAUSE", TRAP_CAUSES)
    wrong.done()
    key = registry.key("04.silent_trap")
    if key is None:
        return
    truth = key["measured"]
    bad = [m for m in truth if measured[m] != truth[m]]
    if bad:
        raise grading.Wrong(f"MEASURED: the status of {len(bad)} of {len(truth)} methods is not what "
                            f"capture.probe measures ({', '.join(bad)})", expected=truth)
