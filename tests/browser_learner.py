"""A learner in JupyterLab (headless Chromium, tests/browser_support.py) on one exercise of 01 and one
of 06, in the learner's build, as issue 22 asks:

- a WRONG answer typed into the exercise cell: its check cell shows one or two short lines, no
  traceback through the course's code, and not the expected value;
- `grading.hint("NN.name")` in a new cell shows that exercise's hint;
- the RIGHT answer (the instructor's solution, from the solved build): the check passes.

The two runs are steps on pages that other browser tests already hold (test_browser.py's 01, run to
its first exercise; test_browser_nb06.py's 06, run down to its widget), so neither notebook runs
twice: `learner_on_01(pg)` and `learner_on_06(pg)`.
"""
from __future__ import annotations

import re

from browser_support import ARTIFACTS, wait_for, wait_ran_to_first_exercise

NB01, NB06 = "01_dtypes_and_overflow.ipynb", "06_batching.ipynb"


def _solved_source(stem: str, exercise_id: str) -> str:
    from course_kit import nbbuild
    nb = nbbuild.build(nbbuild.SOURCES / f"{stem}.py", solved=True)
    cell = next(c for c in nb["cells"] if (c["metadata"].get("course_kit") or {}).get("exercise") == exercise_id
                and c["metadata"]["course_kit"]["role"] == "solution")
    return "".join(cell["source"])


def _index(pg, exercise_id: str, role: str) -> int:
    i = pg.evaluate(
        "([ex, role]) => window.jupyterapp.shell.currentWidget.content.widgets.findIndex(c => {"
        " const m = c.model.getMetadata('course_kit'); return m && m.exercise === ex && m.role === role; })",
        [exercise_id, role])
    assert i >= 0, f"no {role} cell of {exercise_id} in the learner's notebook"
    return i


def _run(pg, index: int, source: str | None = None) -> str:
    """Optionally replace a cell's source (as typing would), run it, wait until it ran and the kernel is
    idle, and return what its output area shows."""
    before = pg.evaluate(
        "([i, src]) => { const nb = window.jupyterapp.shell.currentWidget.content; const c = nb.widgets[i];"
        " if (src !== null) c.model.sharedModel.setSource(src);"
        " nb.activeCellIndex = i; const n = c.model.executionCount;"
        " window.jupyterapp.commands.execute('notebook:run-cell'); return n; }", [index, source])

    def state():
        return pg.evaluate(
            "(i) => { const w = window.jupyterapp.shell.currentWidget; const c = w.content.widgets[i];"
            " return {n: c.model.executionCount, idle: w.sessionContext.session.kernel.status === 'idle',"
            "  text: c.node.querySelector('.jp-OutputArea') ? c.node.querySelector('.jp-OutputArea').innerText : ''}; }",
            index)
    s = wait_for(state, lambda s: s["n"] is not None and s["n"] != before and s["idle"],
                 f"cell {index} should run", timeout_s=120)
    return s["text"]


def _new_cell_below(pg, index: int, source: str) -> str:
    pg.evaluate(
        "(i) => { const nb = window.jupyterapp.shell.currentWidget.content; nb.activeCellIndex = i;"
        " return window.jupyterapp.commands.execute('notebook:insert-cell-below'); }", index)
    wait_for(lambda: pg.evaluate("() => window.jupyterapp.shell.currentWidget.content.activeCellIndex"),
             lambda i: i == index + 1, "a new cell should be inserted below")
    return _run(pg, index + 1, source)


def assert_short_without(text: str, exercise_id: str, hidden: list[str]) -> None:
    """The learner's view of a failed check: one or two lines, naming the exercise, no traceback
    through the course's code, and none of the strings in `hidden` (the expected value)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert 1 <= len(lines) <= 2, f"the feedback should be one or two lines, got {len(lines)}: {text!r}"
    assert f"Exercise {exercise_id}" in lines[0], text
    assert "Traceback" not in text and "course_kit/" not in text and ".py" not in text, text
    for h in hidden:
        assert h not in text, f"the feedback shows the expected value {h!r}: {text!r}"


def assert_hint(text: str, exercise_id: str) -> None:
    from course_kit.grading.checks import registry
    hint = " ".join(registry.get(exercise_id).hint.split())
    assert " ".join(text.split()) == f"Hint for {exercise_id}: {hint}", text


def learner_on_01(pg) -> None:
    """On 01, run to its first exercise (01.predict_overflow): wrong answer, hint, right answer."""
    from course_kit import dtypes
    from course_kit.grading.checks import nb01
    ex = "01.predict_overflow"
    right = _solved_source("01_dtypes_and_overflow", ex)
    case = (3e-8, "fp16")
    truth = dtypes.classify(*case).outcome
    wrong_outcome = "flushed to zero"
    assert truth != wrong_outcome
    wrong = right.replace(f'(3e-8, "fp16"): "{truth}"', f'(3e-8, "fp16"): "{wrong_outcome}"')
    assert wrong != right, "the solution's source changed: update the wrong answer"
    sol, chk = _index(pg, ex, "solution"), _index(pg, ex, "check")
    assert "NotImplementedError" in pg.evaluate(
        "(i) => window.jupyterapp.shell.currentWidget.content.widgets[i].model.sharedModel.getSource()", sol)
    _run(pg, sol, wrong)
    text = _run(pg, chk)
    assert "1 of 12" in text and "you predicted 'flushed to zero'" in text, text
    # every expected outcome of the cases it got wrong, and the expected mapping itself
    assert_short_without(text, ex, [truth, "expected"])
    assert_hint(_new_cell_below(pg, chk, f'grading.hint("{ex}")'), ex)
    _run(pg, sol, right)
    text = _run(pg, chk)
    assert f"Exercise {ex}: passed" in text, text
    pg.screenshot(path=str(ARTIFACTS / "learner_01.png"))
    assert len(nb01.OVERFLOW_CASES) == 12


def learner_on_06(pg) -> None:
    """On 06, whose page ran down to its widget: the rest down to its first exercise (06.first_preempt),
    then wrong answer, hint, right answer."""
    from course_kit.grading.checks import registry
    ex = "06.first_preempt"
    right = _solved_source("06_batching", ex)
    key = registry.key(ex)            # the instructor's answer key (the checkout has it beside the package)
    step, victim = key["step"], key["victim"]
    head = right.split("# 1. predict")[0]                 # the workload the task cell sets up
    wrong = head + f"PREDICTED_STEP = 3\nSTEP = {step + 1}\nVICTIM = {victim}\n"
    below = pg.evaluate(
        "() => { const nb = window.jupyterapp.shell.currentWidget.content;"
        " const i = nb.widgets.findIndex(c => c.model.type === 'code' && c.model.executionCount === null);"
        " nb.activeCellIndex = i; return i; }")
    assert below >= 0, "every cell of 06 already ran"
    pg.evaluate("window.jupyterapp.commands.execute('notebook:run-all-below')")
    wait_ran_to_first_exercise(pg, NB06)        # it stops at the first exercise's stub, as Run All does
    sol, chk = _index(pg, ex, "solution"), _index(pg, ex, "check")
    _run(pg, sol, wrong)
    text = _run(pg, chk)
    assert "STEP" in text, text
    numbers = re.findall(r"\d+", text.replace(ex, ""))
    assert str(step) not in numbers, f"the feedback shows the expected step {step}: {text!r}"
    assert_short_without(text, ex, ["expected"])
    assert_hint(_new_cell_below(pg, chk, f'grading.hint("{ex}")'), ex)
    _run(pg, sol, right)
    text = _run(pg, chk)
    assert f"Exercise {ex}: passed" in text, text
    pg.screenshot(path=str(ARTIFACTS / "learner_06.png"))
