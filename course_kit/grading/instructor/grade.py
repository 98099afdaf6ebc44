"""Grade a folder of submissions: one folder per student, holding that student's notebooks.

Every submission is read (as a hostile file) before any student code runs; each notebook runs in
its own sandbox and its answers are judged in another (runner.py); the gradebook is rewritten
atomically after every notebook, so one bad submission never costs another student's rows.
"""
from __future__ import annotations

import csv
import io
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import nbformat

from . import assemble, cells, disk, runner, sandbox, submissions
from .release import course_notebooks

COLUMNS = ("student", "notebook", "exercise", "points", "max_points", "status", "message")
PROJECT = Path(__file__).resolve().parents[3]
DEFAULT_HIDDEN = PROJECT / "instructor" / "hidden_checks"


class NoSandbox(RuntimeError):
    """No sandbox can be made here and --trusted was not given."""


@dataclass
class Row:
    student: str
    notebook: str
    exercise: str
    points: float
    max_points: float
    status: str
    message: str


def _rows(student: str, notebook: str, outcomes: list[runner.Outcome]) -> list[Row]:
    return [Row(student, notebook, o.exercise, o.points, o.max_points, o.status, o.message) for o in outcomes]


def _all(exercises: list[cells.Exercise], status: str, message: str) -> list[runner.Outcome]:
    return [runner.Outcome(e.id, 0, e.points, status, message) for e in exercises]


def _fmt(x: float) -> str:
    return f"{x:g}"


def _check_disk(out: Path, scratch: Path | None, workers: int, limits: sandbox.Limits, max_bytes: int,
                mode: sandbox.Mode) -> None:
    """Refuse to start without the disk grading needs: per worker, a copy of a notebook and, where a
    run's answers cannot live in a tmpfs, its disk cap; and room for the gradebook and feedback."""
    per_run = max_bytes + (0 if mode.disk == "tmpfs" else limits.disk_bytes)
    where = Path(scratch) if scratch else Path(tempfile.gettempdir())
    disk.check_free({where: workers * per_run + (64 << 20), out.parent: 16 << 20})


def save_csv(path: Path, rows: list[Row], log: Callable[[str], None]) -> bool:
    """write_csv that never stops grading: a failure (a full disk) is logged, and the next call
    writes every row again."""
    try:
        write_csv(path, rows)
        return True
    except OSError as exc:
        log(f"warning: the gradebook {path} could not be written ({exc.strerror or exc}); grading goes on "
            "and writes it again after the next notebook")
        return False


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


def _world_readable_tree(root: Path) -> None:
    for folder, dirs, files in os.walk(root):
        os.chmod(folder, 0o755)
        for f in files:
            os.chmod(os.path.join(folder, f), 0o644)


def _prepare_cases(ids: list[str], stage: Path, hidden: Path | None) -> Path:
    """Every check's plan as data, computed once by the checkers' own process."""
    out = stage / "cases"
    cmd = [sys.executable, "-m", "course_kit.grading.checks.judge", "prepare", "--ids", *ids, "--out", str(out)]
    if hidden is not None:
        cmd += ["--hidden", str(hidden)]
    proc = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise ValueError(f"the checkers could not prepare their inputs: {proc.stderr.strip()[-500:]}")
    _world_readable_tree(out)
    return out


def _stage_data(stage: Path) -> Path | None:
    """Recorded results as the notebooks read them: JSON records only (no executed notebooks, which
    hold solutions)."""
    env = os.environ.get("COURSE_KIT_DATA")
    source = Path(env) / "reference" if env else PROJECT / "data" / "reference"
    if not source.is_dir():
        return None
    target = stage / "data"
    for path in source.rglob("*.json"):
        if path.is_file() and not path.is_symlink():
            dest = target / "reference" / path.relative_to(source)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, dest)
    (target / "reference").mkdir(parents=True, exist_ok=True)
    _world_readable_tree(target)
    return target


def _students(submissions_dir: Path) -> list[tuple[str, Path | None]]:
    """(name, folder) per student; a student 'folder' that is a link or a file gets None."""
    out = []
    for entry in sorted(os.scandir(submissions_dir), key=lambda e: e.name):
        if entry.name.startswith("."):
            continue
        info = os.lstat(entry.path)
        if stat.S_ISDIR(info.st_mode):
            out.append((entry.name, Path(entry.path)))
        elif stat.S_ISLNK(info.st_mode):
            out.append((entry.name, None))
    return out


def grade(submissions_dir: Path, out: Path, source: Path, *, workers: int = 1,
          limits: sandbox.Limits | None = None, scratch: Path | None = None,
          log: Callable[[str], None] = print, hidden: Path | None = None, feedback_level: str = "short",
          max_bytes: int = submissions.MAX_BYTES, trusted: bool = False) -> list[Row]:
    """Grade every student folder in `submissions_dir`; write the gradebook, feedback and summary."""
    submissions_dir, out, source = Path(submissions_dir).resolve(), Path(out).resolve(), Path(source).resolve()
    limits = limits or sandbox.Limits()
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if feedback_level not in ("short", "full"):
        raise ValueError(f"feedback must be 'short' or 'full', got {feedback_level!r}")
    if not submissions_dir.is_dir():
        raise ValueError(f"submissions folder {submissions_dir} does not exist")
    if submissions_dir in out.parents:
        raise ValueError(f"the gradebook {out} must not be inside the submissions folder {submissions_dir}")
    hidden = Path(hidden).resolve() if hidden else (DEFAULT_HIDDEN if DEFAULT_HIDDEN.is_dir() else None)
    mode = sandbox.mode()
    if mode.kind == "none":
        if not trusted:
            raise NoSandbox(f"refusing to run student code: {mode.reason}. Install bubblewrap, or pass "
                            "--trusted to run the submissions with resource limits only (no isolation)")
        log(f"warning: --trusted: {mode.reason}; student code runs with resource limits only")
    else:
        log(f"sandbox: {mode.describe()}")
        if not mode.cpu.startswith("cgroup"):
            log(f"warning: no CPU cap ({mode.cpu}): a run that keeps many CPUs busy slows the other runs, "
                "so a cell of an honest notebook may pass its timeout; grade with --workers 1 to avoid it")
    course: dict[str, list[cells.Exercise]] = {}
    for p in course_notebooks(source):
        exercises = cells.exercises(nbformat.read(str(p), as_version=4))
        for e in exercises:
            if not e.checks + e.hidden:
                raise ValueError(f"{p.name}: exercise {e.id} has no check cell, so it cannot be graded")
        if exercises:
            assemble.exercise_checks(exercises, p.name)   # every check cell calls grading.check
            course[p.name] = exercises
    if not course:
        raise ValueError(f"no notebooks with exercises in {source}")
    ids = sorted({i for exs in course.values() for e in exs for src in e.checks + e.hidden
                  for i in cells.check_ids(src)})
    out.parent.mkdir(parents=True, exist_ok=True)
    _check_disk(out, scratch, workers, limits, max_bytes, mode)
    scratch = Path(scratch) if scratch else Path(tempfile.mkdtemp(prefix="course-kit-grade-"))
    os.chmod(scratch, 0o711)
    try:
        stage = scratch / "stage"
        stage.mkdir()
        os.chmod(stage, 0o755)
        ctx = runner.Context(mode, _prepare_cases(ids, stage, hidden), _stage_data(stage), hidden, limits,
                             feedback_level, log)
        rows = _grade_all(submissions_dir, course, ctx, scratch, workers, max_bytes, out, log)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return _finish(rows, course, out, log)


def _grade_all(submissions_dir: Path, course: dict, ctx: runner.Context, scratch: Path, workers: int,
               max_bytes: int, out: Path, log: Callable[[str], None]) -> list[Row]:
    rows: list[Row] = []
    jobs = []
    for student, folder in _students(submissions_dir):
        for name, exercises in course.items():
            if folder is None:
                rows += _rows(student, name, _all(exercises, "error", "the student's folder is a symbolic link"))
                continue
            path = submissions.find(folder, name)
            if path is None:
                rows += _rows(student, name, _all(exercises, "missing", f"{name} was not submitted"))
                continue
            try:
                nb = submissions.load(path, max_bytes)
                plan = assemble.assemble(nb, exercises)
            except submissions.Malformed as exc:
                rows += _rows(student, name, _all(exercises, "error", str(exc)))
                continue
            except Exception as exc:  # anything else about this file is this student's error only
                rows += _rows(student, name, _all(exercises, "error", f"{path.name} could not be read "
                                                                       f"({type(exc).__name__})"))
                continue
            jobs.append((student, name, exercises, plan, {path.name: nb.text}))
    lock = threading.Lock()
    save_csv(out, rows, log)

    def work(job):
        student, name, exercises, plan, files = job
        try:
            return student, name, runner.run(plan, exercises, files, ctx, scratch)
        except Exception as exc:  # the grader's own failure for this notebook: log it, report one line, go on
            log(f"grader error on {student}/{name}: {type(exc).__name__}: {' '.join(str(exc).split())[:500]}")
            return student, name, _all(exercises, "error", f"grader error ({type(exc).__name__}); the instructor's "
                                                           "log has the details")

    done = 0
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for fut in as_completed([pool.submit(work, j) for j in jobs]):
            student, name, outcomes = fut.result()
            done += 1
            with lock:
                rows += _rows(student, name, outcomes)
                save_csv(out, sorted(rows, key=lambda r: (r.student, r.notebook)), log)
            passed = sum(o.status == "passed" for o in outcomes)
            log(f"[{done}/{len(jobs)}] {student} {name}: {passed}/{len(outcomes)} exercises passed")
    return rows


def _finish(rows: list[Row], course: dict, out: Path, log: Callable[[str], None]) -> list[Row]:
    order = {name: i for i, name in enumerate(course)}
    ex_order = {(n, e.id): i for n, exs in course.items() for i, e in enumerate(exs)}
    rows.sort(key=lambda r: (r.student, order[r.notebook], ex_order.get((r.notebook, r.exercise), 0)))
    if not save_csv(out, rows, log):     # the grades must land somewhere: beside the system's temp files
        spare = Path(tempfile.gettempdir()) / f"course-kit-gradebook-{os.getpid()}.csv"
        try:
            write_csv(spare, rows)
            log(f"error: the gradebook could not be written to {out}; it is in {spare}")
        except OSError as exc:
            log(f"error: the gradebook could not be written anywhere ({exc}); its rows follow")
            for r in rows:
                log(",".join(map(str, (r.student, r.notebook, r.exercise, _fmt(r.points), r.status, r.message))))
    table = summary(rows, list(course))
    fb_dir = out.parent / f"{out.stem}_feedback"
    try:
        fb_dir.mkdir(exist_ok=True)
        for student in sorted({r.student for r in rows}):
            (fb_dir / f"{student}.md").write_text(feedback(student, [r for r in rows if r.student == student]))
        with open(out.parent / f"{out.stem}_summary.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=["student", *course, "total", "max_total"])
            writer.writeheader()
            writer.writerows({k: (_fmt(v) if isinstance(v, float) else v) for k, v in t.items()} for t in table)
    except OSError as exc:
        log(f"error: the feedback files or the summary could not be written ({exc})")
    log(format_summary(table, list(course)))
    log(f"gradebook: {out}\nfeedback: {fb_dir}/")
    return rows
