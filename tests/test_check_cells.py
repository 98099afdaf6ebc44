"""A check cell run before its exercise is answered (issue 42 item 3): one line, "answer the exercise
above first", no traceback; the cell still fails (nbval's raises-exception tag, the grader), and any
other NameError keeps IPython's usual traceback."""
from __future__ import annotations

import nbformat
import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from course_kit.grading import ipython


@pytest.fixture
def shell():
    sh = InteractiveShell.instance(colors="nocolor")
    sh.set_custom_exc((), None)
    # course_kit.grading was imported before this shell existed (a kernel imports it in a cell: see
    # the last test), so install here, as that import does
    assert ipython.install() is True and ipython.install() is False   # once only
    yield sh
    sh.set_custom_exc((), None)
    sh.user_ns.pop("squares", None)


def _run(sh, code):
    with capture_output() as out:
        result = sh.run_cell(code)
    return result, out.stdout + out.stderr


def test_a_check_cell_before_its_answer_says_one_line(shell):
    result, text = _run(shell, 'from course_kit import grading\ngrading.check("99.square", squares)')
    assert isinstance(result.error_in_exec, NameError)          # the cell still fails
    assert text.strip().splitlines() == [
        "\x1b[31m✗ Exercise 99.square: answer the exercise above first (squares is not defined yet)\x1b[0m"]
    result, text = _run(shell, 'from course_kit import grading\ngrading.check("99.add", make_add(2))')
    assert "answer the exercise above first (make_add is not defined yet)" in text and "Traceback" not in text
    shell.run_cell("squares = [i * i for i in range(5)]")
    result, text = _run(shell, 'grading.check("99.square", squares)')
    assert result.error_in_exec is None and "passed" in text


def test_other_name_errors_keep_their_traceback(shell):
    _run(shell, "from course_kit import grading")
    for code in ("print(undefined_name)",                                  # not a check cell
                 "def f():\n    return nope\ngrading.check('99.square', f())",  # raised inside a function
                 "grading.check('99.square', [0, 1, 4, 9, 16])\nprint(gone)"):   # a cell with other code
        _, text = _run(shell, code)
        assert "NameError" in text and "answer the exercise above first" not in text, code


def test_nothing_is_installed_when_grading(shell, monkeypatch):
    shell.set_custom_exc((), None)
    monkeypatch.setenv("COURSE_KIT_GRADE", "/grade")
    assert ipython.install() is False and shell.custom_exceptions == ()


def test_in_a_kernel_the_error_output_is_one_line(tmp_path):
    """What a learner (and nbval, which accepts the error of a raises-exception cell) sees: an error
    output whose traceback is the one line."""
    from nbclient import NotebookClient
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("import course_kit\nfrom course_kit import grading"),
        nbformat.v4.new_code_cell('grading.check("99.square", squares)', metadata={"tags": ["raises-exception"]}),
        nbformat.v4.new_code_cell("squares = [i * i for i in range(5)]"),
        nbformat.v4.new_code_cell('grading.check("99.square", squares)'),
    ])
    NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    [error] = nb.cells[1].outputs
    assert error.output_type == "error" and error.ename == "NameError"
    assert error.traceback == [
        "\x1b[31m✗ Exercise 99.square: answer the exercise above first (squares is not defined yet)\x1b[0m"]
    assert "passed" in nb.cells[3].outputs[0].text
