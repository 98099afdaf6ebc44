"""Release: solutions stubbed, hidden checks gone, outputs cleared, manifest, idempotent; the
exercise-cell format and the check API."""
from __future__ import annotations

import json

import nbformat
import pytest

from course_kit import grading
from course_kit.grading import cells, cli, release

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
    with pytest.raises(AssertionError, match=r"add\(2, 3\): expected 5, found -1"):
        grading.check("99.add", lambda a, b: a - b)
    with pytest.raises(ValueError, match="unknown exercise '99.nope'"):
        grading.check("99.nope", 1)


def test_keep_solutions_gives_a_solved_student_copy():
    solved, _ = release.release_notebook(instructor_notebook(), keep_solutions=True)
    text = json.dumps(solved)
    assert "return a + b" in text and "BEGIN SOLUTION" not in text and "NotImplementedError" not in text
    assert "99.add_hidden" not in text


def test_assemble_matches_by_id_uses_the_last_copy_and_drops_student_checks():
    from course_kit.grading import assemble
    instructor = instructor_notebook()
    student, exercises = release.release_notebook(instructor)
    copy = nbformat.from_dict(json.loads(json.dumps(student.cells[3])))  # the add solution, duplicated
    copy.source = "def add(a, b):\n    return a + b"
    student.cells.append(copy)
    student.cells[4].source = "pass  # the student emptied the visible check"
    plan = assemble.assemble(student, exercises)
    code = [c for c in plan.notebook.cells if c.cell_type == "code"]
    assert "pass  # the student emptied" not in json.dumps(plan.notebook)
    add_solution = [i for i, (ex, role) in plan.roles.items() if (ex, role) == ("99.add", "solution")]
    assert len(add_solution) == 1 and code[add_solution[0]].source == copy.source
    injected = [i for i, (ex, role) in plan.roles.items() if ex == "99.add" and role != "solution"]
    assert injected == [add_solution[0] + 1, add_solution[0] + 2]
    assert all(plan.tokens[i] in code[i].source for i in injected)
    assert plan.missing == set()


def test_world_readable(tmp_path):
    import os

    from course_kit.grading import sandbox
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    (private / "f").write_text("x")
    os.chmod(private / "f", 0o644)
    assert not sandbox.world_readable(str(private / "f"))
    os.chmod(private, 0o755)
    os.chmod(tmp_path, 0o755)
    readable = all(os.stat(p).st_mode & 0o001 for p in list((private / "f").parents)[:-1])
    assert sandbox.world_readable(str(private / "f")) == readable
