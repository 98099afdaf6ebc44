"""A tiny synthetic course for the grading tests: one instructor notebook with two exercises (three
with `with_half`); its hidden checks are the examples in instructor/hidden_checks/nb99.py."""
from __future__ import annotations

import json
from pathlib import Path

import nbformat

NAME = "99_selftest.ipynb"
SOLUTIONS = {
    "99.add": "def add(a, b):\n    return a + b",
    "99.square": "squares = [i * i for i in range(5)]",
}


def _code(src: str, exercise: str | None = None, role: str | None = None, points: float | None = None):
    meta = {}
    if exercise:
        meta = {"course_kit": {"exercise": exercise, "role": role}}
        if points is not None:
            meta["course_kit"]["points"] = points
    return nbformat.v4.new_code_cell(src, metadata=meta)


def instructor_notebook(with_half: bool = False):
    md = nbformat.v4.new_markdown_cell
    cells = [
        md("# Grading self-test"),
        _code("import course_kit\nfrom course_kit import grading"),
        md("## Exercise: write `add(a, b)`"),
        _code("def add(a, b):\n    ### BEGIN SOLUTION\n    return a + b\n    ### END SOLUTION", "99.add", "solution", 2),
        _code('course_kit.grading.check("99.add", add)', "99.add", "check"),
        _code('course_kit.grading.check("99.add_hidden", add)', "99.add", "hidden"),
        md("## Exercise: the first five squares"),
        _code("### BEGIN SOLUTION\nsquares = [i * i for i in range(5)]\n### END SOLUTION", "99.square", "solution", 1),
        _code('from course_kit import grading\ngrading.check("99.square", squares)', "99.square", "check"),
        _code('grading.check("99.square_hidden", squares)', "99.square", "hidden"),
    ]
    if with_half:
        cells += [
            md("## Exercise: halve a tensor"),
            _code("import torch\ndef half(x):\n    ### BEGIN SOLUTION\n    return x * 0.5\n    ### END SOLUTION",
                  "99.half", "solution", 1),
            _code('grading.check("99.half", half)', "99.half", "check"),
        ]
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


def write_course(root: Path, with_half: bool = False) -> Path:
    source = root / "instructor"
    source.mkdir(parents=True)
    nbformat.write(instructor_notebook(with_half), str(source / NAME))
    return source


def fill(student_nb, answers: dict[str, str]):
    """A copy of a released notebook with these answers in the solution cells."""
    nb = nbformat.from_dict(json.loads(json.dumps(student_nb)))
    for cell in nb.cells:
        info = cell.get("metadata", {}).get("course_kit", {})
        if info.get("role") == "solution" and info["exercise"] in answers:
            cell.source = answers[info["exercise"]]
    return nb


def submit(submissions: Path, student: str, nb, name: str = NAME) -> Path:
    folder = submissions / student
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    if isinstance(nb, str):
        path.write_text(nb)
    else:
        nbformat.write(nb, str(path))
    return path
