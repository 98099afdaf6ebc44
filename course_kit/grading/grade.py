"""Grade a folder of submissions: one folder per student, holding that student's notebooks.

Every submission is read into memory before any student code runs, each notebook runs in its own
sandboxed process (runner.py), and the gradebook is rewritten atomically after every notebook, so
a hanging or hostile submission never costs another student's rows.
"""
from __future__ import annotations

import csv
import io
import os
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import nbformat

from . import assemble, cells, runner, sandbox
from .release import course_notebooks

COLUMNS = ("student", "notebook", "exercise", "points", "max_points", "status", "message")


@dataclass
class Row:
    student: str
    notebook: str
    exercise: str
    points: float
    max_points: float
    status: str
    message: str


def _find(student_dir: Path, name: str) -> Path | None:
    """The student's copy of a course notebook: same name, else same NN_ prefix, anywhere inside."""
    exact = sorted(p for p in student_dir.rglob(name) if p.is_file())
    if exact:
        return exact[0]
    prefix = sorted(p for p in student_dir.rglob(name[:3] + "*.ipynb")
                    if p.is_file() and ".ipynb_checkpoints" not in p.parts)
    return prefix[0] if prefix else None


def _rows(student: str, notebook: str, outcomes: list[runner.Outcome]) -> list[Row]:
    return [Row(student, notebook, o.exercise, o.points, o.max_points, o.status, o.message) for o in outcomes]


def _all(exercises: list[cells.Exercise], status: str, message: str) -> list[runner.Outcome]:
    return [runner.Outcome(e.id, 0, e.points, status, message) for e in exercises]


def _fmt(x: float) -> str:
    return f"{x:g}"


def write_csv(path: Path, rows: list[Row]) -> None:
    """Atomically replace the gradebook with these rows."""
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(COLUMNS)
    for r in rows:
        writer.writerow([r.student, r.notebook, r.exercise, _fmt(r.points), _fmt(r.max_points), r.status, r.message])
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(buf.getvalue())
    os.replace(tmp, path)


def feedback(student: str, rows: list[Row]) -> str:
    """A student's feedback in Markdown: per exercise, the points, status and what was found."""
    got, total = sum(r.points for r in rows), sum(r.max_points for r in rows)
    lines = [f"# Feedback for {student}", "", f"Total: **{_fmt(got)} / {_fmt(total)}**", "",
             "| notebook | exercise | points | status | message |", "|---|---|---|---|---|"]
    for r in rows:
        msg = r.message.replace("|", "\\|")
        lines.append(f"| {r.notebook} | {r.exercise} | {_fmt(r.points)}/{_fmt(r.max_points)} | {r.status} | {msg} |")
    return "\n".join(lines) + "\n"


def summary(rows: list[Row], notebooks: list[str]) -> list[dict]:
    """One dict per student: points per notebook, total and maximum."""
    table: dict[str, dict] = {}
    for r in rows:
        entry = table.setdefault(r.student, {"student": r.student, **{n: 0.0 for n in notebooks},
                                             "total": 0.0, "max_total": 0.0})
        entry[r.notebook] += r.points
        entry["total"] += r.points
        entry["max_total"] += r.max_points
    return [table[s] for s in sorted(table)]


def format_summary(table: list[dict], notebooks: list[str]) -> str:
    head = ["student"] + [n.split("_")[0] for n in notebooks] + ["total", "max"]
    body = [[t["student"]] + [_fmt(t[n]) for n in notebooks] + [_fmt(t["total"]), _fmt(t["max_total"])]
            for t in table]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]
    fmt = lambda row: "  ".join(str(x).ljust(w) for x, w in zip(row, widths))  # noqa: E731
    return "\n".join([fmt(head), fmt(["-" * w for w in widths])] + [fmt(r) for r in body])


def grade(submissions: Path, out: Path, source: Path, *, workers: int = 1, limits: runner.Limits | None = None,
          scratch: Path | None = None, log: Callable[[str], None] = print) -> list[Row]:
    """Grade every student folder in `submissions`; write the gradebook, feedback and summary."""
    submissions, out, source = Path(submissions).resolve(), Path(out).resolve(), Path(source).resolve()
    limits = limits or runner.Limits()
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if not submissions.is_dir():
        raise ValueError(f"submissions folder {submissions} does not exist")
    if submissions in out.parents:
        raise ValueError(f"the gradebook {out} must not be inside the submissions folder {submissions}")
    course = {p.name: cells.exercises(nbformat.read(str(p), as_version=4)) for p in course_notebooks(source)}
    course = {name: ex for name, ex in course.items() if ex}
    if not course:
        raise ValueError(f"no notebooks with exercises in {source}")
    students = sorted(p for p in submissions.iterdir() if p.is_dir() and not p.name.startswith("."))
    mode = sandbox.mode()
    if mode == "none":
        log("warning: not root and no bubblewrap: student code runs with resource limits only")
    elif mode == "uid":
        log(f"sandbox: each notebook runs as its own unprivileged uid ({sandbox.drop_method()})")
    else:
        log("sandbox: bubblewrap, read-only file system except the scratch copy")
    out.parent.mkdir(parents=True, exist_ok=True)
    # Scratch copies live under /tmp (world-traversable), away from the gradebook and submissions.
    import tempfile
    scratch = Path(scratch) if scratch else Path(tempfile.mkdtemp(prefix="course-kit-grade-"))

    # Read every submission before running anything: later runs can't change what is graded.
    rows: list[Row] = []
    jobs = []
    for student in students:
        for name, exercises in course.items():
            path = _find(student, name)
            if path is None:
                rows += _rows(student.name, name, _all(exercises, "missing", f"{name} was not submitted"))
                continue
            try:
                text = path.read_text()
                nb = nbformat.reads(text, as_version=4)
            except Exception as exc:  # not JSON, not a notebook, unreadable
                msg = f"{path.name} could not be read as a notebook: {type(exc).__name__}: {exc}"
                rows += _rows(student.name, name, _all(exercises, "error", msg))
                continue
            jobs.append((student.name, name, exercises, assemble.assemble(nb, exercises), {path.name: text}))
    lock = threading.Lock()
    with lock:
        write_csv(out, rows)
    # One fresh sandbox uid per notebook run (not per worker): nothing a run leaves behind in
    # world-writable places is writable by a later run, and its processes are found by uid.
    uid_base = sandbox.UID_BASE + (os.getpid() % 10_000) * 10_000

    def work(index_job):
        index, (student, name, exercises, plan, files) = index_job
        uid = uid_base + index % 10_000 if mode == "uid" else None
        try:
            return student, name, runner.run(plan, exercises, scratch, limits, uid, files)
        except Exception as exc:  # the grader's own failure for this notebook: report it, go on
            return student, name, _all(exercises, "error", f"grader error: {type(exc).__name__}: {exc}")

    done = 0
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for fut in as_completed([pool.submit(work, ij) for ij in enumerate(jobs)]):
            student, name, outcomes = fut.result()
            done += 1
            with lock:
                rows += _rows(student, name, outcomes)
                write_csv(out, sorted(rows, key=lambda r: (r.student, r.notebook)))
            passed = sum(o.status == "passed" for o in outcomes)
            log(f"[{done}/{len(jobs)}] {student} {name}: {passed}/{len(outcomes)} exercises passed")
    sandbox.remove(scratch)

    order = {name: i for i, name in enumerate(course)}
    ex_order = {(n, e.id): i for n, exs in course.items() for i, e in enumerate(exs)}
    rows.sort(key=lambda r: (r.student, order[r.notebook], ex_order.get((r.notebook, r.exercise), 0)))
    write_csv(out, rows)
    fb_dir = out.parent / f"{out.stem}_feedback"
    fb_dir.mkdir(exist_ok=True)
    for student in students:
        (fb_dir / f"{student.name}.md").write_text(feedback(student.name, [r for r in rows if r.student == student.name]))
    table = summary(rows, list(course))
    with open(out.parent / f"{out.stem}_summary.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["student", *course, "total", "max_total"])
        writer.writeheader()
        writer.writerows({k: (_fmt(v) if isinstance(v, float) else v) for k, v in t.items()} for t in table)
    log(format_summary(table, list(course)))
    log(f"gradebook: {out}\nfeedback: {fb_dir}/")
    return rows

