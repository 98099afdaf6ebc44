"""The grading package's split (issue 21 item 6) and what learners install (issue 18 item 4).
The import rule itself is stated once, in tests/test_layers.py; here: what the tools load at run time.

Checkers (course_kit/grading/checks/) may use lesson code as an oracle; the instructor's tools
(course_kit/grading/instructor/: release, grade, sandbox, runner) never import lessons, checkers or
torch; hidden checkers and solutions are not in the package at all.
"""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
INSTRUCTOR = PROJECT / "course_kit" / "grading" / "instructor"


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            found.add("." * node.level + (node.module or ""))
    return found


def test_importing_the_tools_loads_no_lesson_module_and_no_torch():
    code = ("import sys\nimport course_kit.grading.instructor.grade, course_kit.grading.instructor.cli\n"
            "bad = [m for m in sys.modules if m == 'torch' or (m.startswith('course_kit.') and not "
            "m.startswith('course_kit.grading.instructor') and m not in ('course_kit.grading', 'course_kit._moved'))]\n"
            "print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = eval(out)  # a printed list of module names
    # course_kit.grading's __init__ (the learner API) is light: feedback, registry and the one-line
    # message of a check cell run too early (ipython.py, standard library only)
    assert set(loaded) <= {"course_kit.grading.checks", "course_kit.grading.checks.feedback",
                           "course_kit.grading.checks.registry", "course_kit.grading.ipython"}, loaded


def test_hidden_checks_and_solutions_are_not_in_the_package():
    hidden = PROJECT / "instructor" / "hidden_checks"
    ids = set()
    for path in hidden.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "exercise":
                ids.add(node.args[0].value)
    assert ids, "the example hidden checks are gone"
    assert not (PROJECT / "instructor" / "__init__.py").exists()
    pyproject = (PROJECT / "pyproject.toml").read_text()
    # only the package and its subpackages are installed: instructor/ (the hidden checks) is not
    assert 'include = ["course_kit", "course_kit.*"]' in pyproject
    for path in (PROJECT / "course_kit").rglob("*"):
        if path.suffix == ".ipynb":
            raise AssertionError(f"a notebook inside the package: {path}")
        if path.suffix == ".py":
            text = path.read_text()
            leaked = [i for i in ids if i in text]
            assert not leaked, f"{path} names hidden checks {leaked}"
            if path.parent.name == "checks":
                assert "### BEGIN SOLUTION" not in text
