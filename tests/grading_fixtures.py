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


def judge_verdicts(exercise_id: str, answers: dict, tmp_path: Path, monkeypatch) -> dict:
    """Grade each answer as `course-kit grade` does, for one exercise: the checkers' plan of the cases
    (judge.prepare, run here as `judge prepare` runs it), the notebook side records the answer as data
    (`check` with COURSE_KIT_GRADE set), and the judge, another process where no learner code runs,
    gives the verdicts (one process for all the answers). Returns {answer name: {"status", "message"}}."""
    import shutil
    import subprocess
    import sys

    from course_kit import grading
    from course_kit.grading.checks import judge as judge_module
    judge_module.prepare([exercise_id], tmp_path / "cases")
    argv = [sys.executable, "-m", "course_kit.grading.checks.judge", "verdict"]
    for name, answer in answers.items():
        folder = tmp_path / name
        shutil.copytree(tmp_path / "cases", folder / "cases")
        monkeypatch.setenv(grading.GRADE_ENV, str(folder))
        grading.check(exercise_id, answer)
        monkeypatch.delenv(grading.GRADE_ENV)
        job = tmp_path / f"{name}.json"
        job.write_text(json.dumps({"answers": str(folder / "answers"), "checks": [{"id": exercise_id}]}))
        argv += ["--job", str(job), "--out", str(tmp_path / f"{name}.verdicts.json")]
    subprocess.run(argv, check=True)
    return {name: json.loads((tmp_path / f"{name}.verdicts.json").read_text())["verdicts"][exercise_id]
            for name in answers}


def fails(exercise_id: str, *values, says: str | None = None, hides=()) -> str:
    """Check that `values` fail the exercise's check with short feedback: one line, under 400
    characters, no expected value (not even the full-feedback form), `says` in it, none of `hides`."""
    import pytest

    from course_kit import grading
    with pytest.raises(grading.CheckFailed) as info:
        grading.check(exercise_id, *values)
    msg = info.value.message
    if says:
        assert says in msg, msg
    assert "\n" not in msg and len(msg) < 400, msg
    assert "(expected" not in msg, msg
    for h in hides:
        assert str(h) not in msg, (h, msg)
    return msg


def shows(msg: str, value: float) -> bool:
    """Does the message show this number (to 3, 4 or 6 significant digits), as a number of its own?"""
    import re
    return any(re.search(rf"(?<![\d.]){re.escape(f'{value:.{d}g}')}(?!\d)", msg) for d in (3, 4, 6))


def solution_namespace(notebook: str, exercise_id: str, head: str = "", namespace: dict | None = None) -> dict:
    """Run one exercise's solution cell of the solved build (notebook: "09" or "00_start_here.py")
    in a fresh namespace (seeded with `namespace`, after running `head`) and return it."""
    from course_kit import nbbuild
    [src] = sorted(nbbuild.SOURCES.glob(f"{notebook.removesuffix('.py')}*.py"))
    cells = [c for c in nbbuild.build(src, solved=True)["cells"]
             if (c["metadata"].get("course_kit") or {}).get("exercise") == exercise_id
             and c["metadata"]["course_kit"]["role"] == "solution"]
    assert len(cells) == 1, f"{exercise_id}: {len(cells)} solution cells"
    ns: dict = dict(namespace or {})
    exec(compile(head + "".join(cells[0]["source"]), f"<{exercise_id} solution>", "exec"), ns)
    return ns
