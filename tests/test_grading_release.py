"""Release: solutions stubbed, hidden checks gone, outputs cleared, manifest, idempotent; the
exercise-cell format and the check API."""
from __future__ import annotations

import json

import nbformat
import pytest

from course_kit import grading
from course_kit.grading.instructor import cells, release
from course_kit.grading.instructor import cli

from grading_fixtures import NAME, instructor_notebook, write_course


def test_release_stubs_solutions_drops_hidden_and_is_idempotent(tmp_path):
    source = write_course(tmp_path)
    nb = nbformat.read(str(source / NAME), as_version=4)
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", text="old output")]
    nb.cells[1].execution_count = 7
    nbformat.write(nb, str(source / NAME))

    manifest = release.release(source, tmp_path / "a")
    release.release(source, tmp_path / "b")
    again = release.release(source, tmp_path / "a")
    assert manifest == again
    for name in (NAME, "manifest.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()

    student = nbformat.read(str(tmp_path / "a" / NAME), as_version=4)
    text = json.dumps(student)
    assert "BEGIN SOLUTION" not in text and "return a + b" not in text
    assert 'raise NotImplementedError(\\"Exercise 99.add\\")' in text
    assert not [c for c in student.cells if cells.role(c) == "hidden"]
    assert "99.add_hidden" not in text and "len(squares) == 5" not in text
    assert all(c.outputs == [] and c.execution_count is None for c in student.cells if c.cell_type == "code")
    # the stub keeps the indentation of the marker, so the function still parses
    add_cell = next(c for c in student.cells if cells.role(c) == "solution")
    compile(add_cell.source, "<add>", "exec")
    assert manifest == {"format": 1, "total_points": 3, "notebooks": [{
        "notebook": NAME, "points": 3, "exercises": [
            {"id": "99.add", "points": 2, "hidden_checks": 1},
            {"id": "99.square", "points": 1, "hidden_checks": 1}]}]}


def test_release_cli_register(tmp_path, capsys):
    source = write_course(tmp_path)
    assert cli.main(["release", "--source", str(source), "--out", str(tmp_path / "r")]) == 0
    assert "99.add (2)" in capsys.readouterr().out
    assert (tmp_path / "r" / "manifest.json").exists()


def test_strip_solution_errors_name_the_problem():
    with pytest.raises(ValueError, match="never closed"):
        cells.strip_solution("### BEGIN SOLUTION\nx = 1", "01.x")
    with pytest.raises(ValueError, match="no '### BEGIN SOLUTION'"):
        cells.strip_solution("x = 1", "01.x")
    with pytest.raises(ValueError, match="without"):
        cells.strip_solution("### END SOLUTION", "01.x")


def test_exercise_metadata_is_validated():
    nb = instructor_notebook()
    nb.cells[3].metadata["course_kit"]["points"] = -1
    with pytest.raises(ValueError, match="points -1"):
        cells.exercises(nb)
    nb = instructor_notebook()
    nb.cells[4].metadata["course_kit"]["role"] = "answer"
    with pytest.raises(ValueError, match="role 'answer'"):
        cells.exercises(nb)
    nb = instructor_notebook()
    nb.cells[1].source += "\n### BEGIN SOLUTION\nsecret = 1\n### END SOLUTION"
    with pytest.raises(ValueError, match="would leak"):
        release.release_notebook(nb)


def test_check_gives_friendly_messages(capsys):
    grading.check("99.add", lambda a, b: a + b)
    assert "passed" in capsys.readouterr().out
    with pytest.raises(grading.CheckFailed, match=r"add\(2, 3\): found -1$"):
        grading.check("99.add", lambda a, b: a - b)
    with pytest.raises(ValueError, match="unknown exercise '99.nope'"):
        grading.check("99.nope", 1)


def test_keep_solutions_gives_a_solved_student_copy():
    solved, _ = release.release_notebook(instructor_notebook(), keep_solutions=True)
    text = json.dumps(solved)
    assert "return a + b" in text and "BEGIN SOLUTION" not in text and "NotImplementedError" not in text
    assert "99.add_hidden" not in text


def test_assemble_matches_by_id_drops_student_checks_and_refuses_duplicates():
    from course_kit.grading.instructor import assemble, submissions
    instructor = instructor_notebook()
    student, exercises = release.release_notebook(instructor)
    student.cells[4].source = "pass  # the student emptied the visible check"
    nb = submissions.parse(nbformat.writes(student).encode(), NAME)
    plan = assemble.assemble(nb, exercises)
    assert all("pass  # the student emptied" not in s.code for s in plan.steps)
    roles = [(s.exercise, s.role) for s in plan.steps if s.exercise == "99.add"]
    assert roles == [("99.add", "solution"), ("99.add", "check"), ("99.add", "hidden")]
    assert plan.checks == {"99.add": ["99.add", "99.add_hidden"], "99.square": ["99.square", "99.square_hidden"]}
    copy = nbformat.from_dict(json.loads(json.dumps(student.cells[3])))  # the add solution, duplicated
    copy.id = "copy"
    student.cells.append(copy)
    plan = assemble.assemble(submissions.parse(nbformat.writes(student).encode(), NAME), exercises)
    assert plan.duplicated == {"99.add"} and "99.add" not in plan.checks and plan.missing == set()


def test_check_cells_may_only_call_check():
    assert cells.check_ids('from course_kit import grading\ngrading.check("01.a", x)\ncheck("01.b", y)') == \
        ["01.a", "01.b"]
    for bad in ("assert x == 1", "grading.check(name, x)", "print('ok')", "", "grading.check('1.x', y)"):
        with pytest.raises(ValueError):
            cells.check_ids(bad)


def test_traversable(tmp_path):
    import os

    from course_kit.grading.instructor import sandbox
    private = tmp_path / "private"
    (private / "inner").mkdir(parents=True)
    os.chmod(private, 0o700)
    assert not sandbox.traversable(str(private / "inner"))
    os.chmod(private, 0o711)
    assert sandbox.traversable(str(private / "inner")) == all(
        os.stat(p).st_mode & 0o001 for p in list((private / "inner").parents)[:-1])
