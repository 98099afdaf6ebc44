"""Issue 11's CI test on the real course: release it, grade the instructor solutions (full marks)
and the raw release (zero, NotImplementedError for every exercise).

Every notebook runs twice, so by default (CI) two quick notebooks are graded; the whole course is
graded with COURSE_KIT_GRADE_COURSE=1 (the instructor's release check), e.g.
    COURSE_KIT_GRADE_COURSE=1 .venv/bin/pytest -q tests/test_grading_course.py
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from course_kit.grading.instructor import grade, release, sandbox

PROJECT = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(sandbox.mode().kind == "none", reason="no sandbox can be made here")]
WHOLE_COURSE = os.environ.get("COURSE_KIT_GRADE_COURSE") == "1"
QUICK = {"00_start_here.ipynb", "04_graph_capture.ipynb"}


def test_course_release_solutions_full_marks_raw_release_zero(tmp_path):
    SOURCE = tmp_path / "solved"          # the instructor's tree: the solved build, hidden checks included
    numbers = [] if WHOLE_COURSE else sorted(n[:2] for n in QUICK)
    subprocess.run([sys.executable, "-m", "course_kit.nbbuild", *numbers, "--solved", str(SOURCE)],
                   check=True, cwd=PROJECT, capture_output=True)
    manifest = release.release(SOURCE, tmp_path / "release")
    graded = [n["notebook"] for n in manifest["notebooks"]
              if n["exercises"] and (WHOLE_COURSE or n["notebook"] in QUICK)]
    assert graded, "no course notebook has exercises yet"
    subs = tmp_path / "subs"
    for name in graded:
        nb = nbformat.read(str(SOURCE / name), as_version=4)
        solved, _ = release.release_notebook(nb, keep_solutions=True)
        (subs / "solved").mkdir(parents=True, exist_ok=True)
        (subs / "solved" / name).write_text(nbformat.writes(solved))
        (subs / "raw").mkdir(exist_ok=True)
        (subs / "raw" / name).write_bytes((tmp_path / "release" / name).read_bytes())
    rows = grade.grade(subs, tmp_path / "gb.csv", SOURCE, workers=2,
                       limits=sandbox.Limits(cell_timeout=600, total_timeout=1800), log=print)
    rows = [r for r in rows if r.notebook in graded]       # the others were not submitted
    assert rows
    solved = [r for r in rows if r.student == "solved"]
    raw = [r for r in rows if r.student == "raw"]
    assert all(r.status == "passed" and r.points == r.max_points for r in solved), \
        [(r.exercise, r.status, r.message) for r in solved if r.status != "passed"]
    assert all(r.points == 0 and "NotImplementedError" in r.message for r in raw), \
        [(r.exercise, r.status, r.message) for r in raw if "NotImplementedError" not in r.message]
