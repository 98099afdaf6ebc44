"""Grading acceptance (issue 11): each hostile or broken submission, graded next to good ones.

One synthetic course notebook (tests/grading_fixtures.py) keeps every kernel run tiny. All the
single-submission cases are graded in one `grade` call with 2 workers; the 30-submission case is
its own test.
"""
from __future__ import annotations

import csv
import os
import time

import nbformat
import pytest

from course_kit.grading.instructor import cli, grade, release, runner, sandbox

from grading_fixtures import NAME, SOLUTIONS, fill, submit, write_course

# 15 s a cell: the hog's 8 GiB must reach the 1 GiB cap before its cell times out, also on a busy
# 2-core machine, where a first touch of memory pages can run at 250 MB/s (a 3 GiB cap once took
# longer than 15 s); these notebooks import no torch, so 1 GiB is ample for the honest ones
LIMITS = sandbox.Limits(cell_timeout=15, total_timeout=120, memory_bytes=1 << 30)

pytestmark = pytest.mark.skipif(sandbox.mode().kind == "none", reason="no sandbox can be made here (bubblewrap)")


def _read(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _by(rows):
    return {(r["student"], r["exercise"]): r for r in rows}


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    root = tmp_path_factory.mktemp("course")
    source = write_course(root)
    release.release(source, root / "release")
    student = nbformat.read(str(root / "release" / NAME), as_version=4)
    return root, source, student


@pytest.fixture(scope="module")
def graded(course):
    """Grade one submission per acceptance case; return (rows, gradebook path, paths, log)."""
    root, source, student = course
    subs = root / "submissions"
    paths = {}
    paths["full"] = submit(subs, "full", fill(student, SOLUTIONS))
    paths["raw"] = submit(subs, "raw", student)
    paths["loop"] = submit(subs, "loop", fill(student, {"99.add": "while True:\n    pass",
                                                         "99.square": SOLUTIONS["99.square"]}))
    # an exception in one exercise, and the other exercise's cell deleted
    broken = fill(student, {"99.add": "import os\n"
                                      "raise RuntimeError(f\"boom in add, secret={os.environ.get('GRADER_SECRET')}\")"})
    broken.cells = [c for c in broken.cells
                    if c.get("metadata", {}).get("course_kit", {}).get("exercise") != "99.square"]
    paths["broken"] = submit(subs, "broken", broken)
    # the add cell moved to the very end, and scratch cells added all over
    moved = fill(student, SOLUTIONS)
    add_cell = next(c for c in moved.cells if c.get("metadata", {}).get("course_kit", {}).get("role") == "solution")
    moved.cells.remove(add_cell)
    for i in (len(moved.cells), 4, 2):
        moved.cells.insert(i, nbformat.v4.new_code_cell(f"scratch_{i} = sum(range({i}))\nprint(scratch_{i})"))
    moved.cells.insert(3, nbformat.v4.new_markdown_cell("my notes"))
    moved.cells.append(add_cell)
    paths["moved"] = submit(subs, "moved", moved)
    paths["invalid"] = submit(subs, "invalid", '{"cells": [ this is not json')
    out = root / "results" / "gradebook.csv"
    paths["gradebook"] = out
    victim = subs / "full" / NAME
    victim_bytes = victim.read_bytes()
    evil_code = (
        "import pathlib\n"
        f"for target in [{str(out)!r}, {str(victim)!r}]:\n"
        "    pathlib.Path(target).write_text('overwritten')\n"
        "def add(a, b):\n    return a + b"
    )
    hog = "squares = bytearray(8 << 30)  # more than the memory limit"
    paths["evil"] = submit(subs, "evil", fill(student, {"99.add": evil_code, "99.square": hog}))
    monkey = (
        "import course_kit, course_kit.grading\n"
        "import course_kit.grading.checks.nb99 as nb99\n"
        "course_kit.grading.check = lambda *a, **k: print('✅ passed')\n"
        "course_kit.grading.expect = lambda *a, **k: None\n"
        "course_kit.grading._SPECS.clear()\n"
        "nb99.check_add = lambda *a: None\n"
        "grading = course_kit.grading\n"
        "def add(a, b):\n    return 0"
    )
    monkeyed = fill(student, {"99.add": monkey, "99.square": "squares = [0]"})
    for c in monkeyed.cells:  # and its visible check cells edited to do nothing
        if c.get("metadata", {}).get("course_kit", {}).get("role") == "check":
            c.source = "pass"
    paths["monkey"] = submit(subs, "monkey", monkeyed)
    log = []
    start = time.perf_counter()
    os.environ["GRADER_SECRET"] = "s3cret"  # the grader's environment is not the students'
    try:
        rows = grade.grade(subs, out, source, workers=2, limits=LIMITS, log=log.append)
    finally:
        del os.environ["GRADER_SECRET"]
    elapsed = time.perf_counter() - start
    return rows, paths, victim_bytes, log, elapsed


def test_gradebook_has_every_row_and_the_columns(graded):
    rows, paths, _, log, elapsed = graded
    csv_rows = _read(paths["gradebook"])
    assert list(csv_rows[0]) == list(grade.COLUMNS)
    students = {"full", "raw", "loop", "broken", "moved", "invalid", "evil", "monkey"}
    assert {(r["student"], r["exercise"]) for r in csv_rows} == {(s, e) for s in students for e in SOLUTIONS}
    assert all(r["status"] in runner.STATUSES for r in csv_rows)
    assert "total" in log[-2] or any("total" in line for line in log)
    feedback = paths["gradebook"].parent / "gradebook_feedback" / "loop.md"
    assert "timeout" in feedback.read_text()
    summary = _read(paths["gradebook"].parent / "gradebook_summary.csv")
    assert {r["student"]: r["total"] for r in summary}["full"] == "3"
    print(f"graded {len(students)} submissions in {elapsed:.1f} s")


def _status(graded, student, exercise):
    row = _by(_read(graded[1]["gradebook"]))[(student, exercise)]
    return row["status"], float(row["points"]), row["message"]


def test_instructor_solutions_get_full_marks(graded):
    assert _status(graded, "full", "99.add")[:2] == ("passed", 2)
    assert _status(graded, "full", "99.square")[:2] == ("passed", 1)


def test_raw_release_gets_zero_with_not_implemented_for_each_exercise(graded):
    for ex in SOLUTIONS:
        status, points, message = _status(graded, "raw", ex)
        assert (status, points) == ("error", 0)
        assert f"NotImplementedError: Exercise {ex}" in message


def test_infinite_loop_times_out_and_the_other_exercise_is_graded(graded):
    status, points, message = _status(graded, "loop", "99.add")
    assert status == "timeout" and points == 0 and f"cell timeout of {LIMITS.cell_timeout} s" in message
    assert _status(graded, "loop", "99.square")[:2] == ("passed", 1)


def test_exception_is_an_error_with_its_message_and_a_deleted_cell_is_missing(graded):
    status, _, message = _status(graded, "broken", "99.add")
    assert status == "error" and "RuntimeError: boom in add, secret=None" in message
    status, _, message = _status(graded, "broken", "99.square")
    assert status == "missing" and "99.square" in message


def test_moved_cell_and_extra_scratch_cells_keep_full_marks(graded):
    assert _status(graded, "moved", "99.add")[:2] == ("passed", 2)
    assert _status(graded, "moved", "99.square")[:2] == ("passed", 1)


def test_invalid_json_is_an_error_for_every_exercise(graded):
    for ex in SOLUTIONS:
        status, _, message = _status(graded, "invalid", ex)
        assert status == "error" and "is not valid JSON" in message


def test_overwriting_gradebook_or_other_submissions_changes_nothing(graded):
    _, paths, victim_bytes, _, _ = graded
    assert _status(graded, "full", "99.add")[0] == "passed"   # graded from what was submitted
    rows = _read(paths["gradebook"])
    assert len(rows) == 16
    # the sandbox sees neither path: the write fails in the solution cell, nothing changes
    assert paths["full"].read_bytes() == victim_bytes
    status, _, message = _status(graded, "evil", "99.add")
    assert status == "error" and ("FileNotFoundError" in message or "PermissionError" in message), message


def test_memory_limit_turns_a_huge_allocation_into_an_error(graded):
    status, _, message = _status(graded, "evil", "99.square")
    assert status == "error" and ("memory cap" in message or "MemoryError" in message), message


def test_monkeypatched_check_and_edited_check_cells_still_fail(graded):
    # check() replaced in the kernel: it records no answer, and the verdict is made elsewhere anyway
    for ex in ("99.add", "99.square"):
        status, points, message = _status(graded, "monkey", ex)
        assert (status, points) == ("error", 0) and "recorded no answer" in message, message


def test_thirty_submissions_two_workers_every_row_present(tmp_path):
    source = tmp_path / "instructor"
    source.mkdir()
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("### BEGIN SOLUTION\nsquares = [i * i for i in range(5)]\n### END SOLUTION",
                                  metadata={"course_kit": {"exercise": "99.square", "role": "solution", "points": 1}}),
        nbformat.v4.new_code_cell('from course_kit import grading\ngrading.check("99.square", squares)',
                                  metadata={"course_kit": {"exercise": "99.square", "role": "check"}}),
    ])
    nbformat.write(nb, str(source / "98_tiny.ipynb"))
    release.release(source, tmp_path / "release")
    student = nbformat.read(str(tmp_path / "release" / "98_tiny.ipynb"), as_version=4)
    subs = tmp_path / "subs"
    for i in range(30):
        answer = SOLUTIONS["99.square"] if i % 3 else "squares = [1, 2, 3]"
        submit(subs, f"s{i:02d}", fill(student, {"99.square": answer}), name="98_tiny.ipynb")
    out = tmp_path / "gb.csv"
    start = time.perf_counter()
    assert cli.main(["grade", str(subs), "--out", str(out), "--workers", "2", "--timeout", "30",
                     "--source", str(source), "--memory-gb", "4"]) == 0
    elapsed = time.perf_counter() - start
    rows = _read(out)
    assert sorted(r["student"] for r in rows) == [f"s{i:02d}" for i in range(30)]
    assert [r["status"] for r in sorted(rows, key=lambda r: r["student"])] == \
        ["passed" if i % 3 else "failed" for i in range(30)]
    print(f"30 submissions, 2 workers: {elapsed:.1f} s")


def test_limits_are_validated():
    with pytest.raises(ValueError, match="cell_timeout must be > 0"):
        sandbox.Limits(cell_timeout=0)
    with pytest.raises(ValueError, match="workers must be >= 1"):
        grade.grade(".", "x.csv", ".", workers=0)


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return any(line.startswith("State:") and line.split()[1] in ("Z", "X") for line in f)
    except OSError:
        return True


def _proc_uids() -> list[tuple[int, int]]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            found.append((int(entry), os.stat(f"/proc/{entry}").st_uid)) if entry.isdigit() else None
        except OSError:
            pass
    return found


def test_total_timeout_stops_the_run_and_leaves_no_process(tmp_path):
    source = tmp_path / "instructor"
    source.mkdir()
    cells = []
    for name in ("first", "second"):
        meta = {"course_kit": {"exercise": f"98.{name}", "role": "solution", "points": 1}}
        body = "import time\nwhile True:\n    time.sleep(0.01)" if name == "first" else "squares = [0, 1, 4, 9, 16]"
        cells.append(nbformat.v4.new_code_cell(f"### BEGIN SOLUTION\n{body}\n### END SOLUTION", metadata=meta))
        cells.append(nbformat.v4.new_code_cell('grading.check("99.square", [0, 1, 4, 9, 16])',
                                               metadata={"course_kit": {"exercise": f"98.{name}", "role": "check"}}))
    nbformat.write(nbformat.v4.new_notebook(cells=cells), str(source / "98_tiny.ipynb"))
    solved, _ = release.release_notebook(nbformat.read(str(source / "98_tiny.ipynb"), as_version=4),
                                         keep_solutions=True)
    submit(tmp_path / "subs", "slow", solved, name="98_tiny.ipynb")
    limits = sandbox.Limits(cell_timeout=120, total_timeout=6, memory_bytes=4 << 30)
    start = time.perf_counter()
    rows = grade.grade(tmp_path / "subs", tmp_path / "gb.csv", source, limits=limits, log=lambda _: None)
    assert time.perf_counter() - start < 60
    assert [(r.exercise, r.status) for r in rows] == [("98.first", "timeout"), ("98.second", "timeout")]
    assert "total timeout of 6 s" in rows[0].message
    if sandbox.mode().kind == "bwrap-uid":
        uids = sandbox.session_uids()      # this process's graders' uids (others may grade at once)
        for _ in range(50):   # killed processes may take a moment to be reaped
            leftover = [pid for pid, uid in _proc_uids() if uid in uids and not _zombie(pid)]
            if not leftover:
                break
            time.sleep(0.1)
        assert not leftover, f"processes left running as sandbox uids: {leftover}"


def test_without_a_sandbox_grade_refuses_unless_trusted(tmp_path, monkeypatch):
    source = write_course(tmp_path)
    release.release(source, tmp_path / "release")
    student = nbformat.read(str(tmp_path / "release" / NAME), as_version=4)
    submit(tmp_path / "subs", "ann", fill(student, SOLUTIONS))
    monkeypatch.setattr(sandbox, "_MODE", sandbox.Mode("none", "rlimit (per process)", "bwrap is not installed"))
    with pytest.raises(grade.NoSandbox, match="refusing to run student code: bwrap is not installed"):
        grade.grade(tmp_path / "subs", tmp_path / "gb.csv", source, log=lambda _: None)
    assert cli.main(["grade", str(tmp_path / "subs"), "--out", str(tmp_path / "gb.csv"),
                     "--source", str(source)]) == 2
    log = []
    rows = grade.grade(tmp_path / "subs", tmp_path / "gb.csv", source, limits=LIMITS, trusted=True, log=log.append)
    assert "--trusted" in log[0] and [r.status for r in rows] == ["passed", "passed"]
