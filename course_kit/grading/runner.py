"""Run one assembled notebook under nbval in a sandbox and turn its cell outcomes into statuses."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat

from . import sandbox
from .assemble import Plan
from .cells import Exercise

STATUSES = ("passed", "failed", "error", "timeout", "missing")
KERNEL_NAME = "course-kit-sandbox"


@dataclass
class Limits:
    cell_timeout: float = 120.0      # seconds per cell (nbval interrupts the kernel after this)
    total_timeout: float = 1800.0    # seconds for the whole notebook, kernel start included
    memory_bytes: int = 8 << 30      # address-space limit of the student's kernel
    threads: int = 1                 # OMP/MKL threads of the student's kernel

    def __post_init__(self) -> None:
        for name in ("cell_timeout", "total_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0 seconds, got {getattr(self, name)!r}")
        if self.memory_bytes < 0:
            raise ValueError(f"memory_bytes must be >= 0 (0 means no limit), got {self.memory_bytes}")


@dataclass
class Outcome:
    exercise: str
    points: float
    max_points: float
    status: str
    message: str


def _kernelspec(control: Path, work: Path, uid: int | None, limits: Limits) -> None:
    argv = [sys.executable, "-m", "course_kit.grading.kernel_launcher", "--work", str(work),
            "--memory", str(limits.memory_bytes), "--pidfile", str(control / "kernel.pid")]
    if uid is not None:
        argv += ["--uid", str(uid), "--gid", str(uid)]
    spec_dir = control / "jupyter" / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps(
        {"argv": argv + ["-f", "{connection_file}"], "display_name": "course_kit sandbox",
         "language": "python", "interrupt_mode": "signal"}))


def _env(control: Path, limits: Limits) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "JPY_"))}
    threads = str(limits.threads)
    env.update(JUPYTER_PATH=str(control / "jupyter"), JUPYTER_RUNTIME_DIR=str(control / "runtime"),
               JUPYTER_DATA_DIR=str(control / "data"), IPYTHONDIR=str(control / "ipython"),
               HOME=str(control), COURSE_KIT_GRADE_RESULTS=str(control / "results.jsonl"),
               COURSE_KIT_SMOKE=env.get("COURSE_KIT_SMOKE", "1"), OMP_NUM_THREADS=threads,
               MKL_NUM_THREADS=threads, OPENBLAS_NUM_THREADS=threads, MALLOC_ARENA_MAX="2",
               PYTHONDONTWRITEBYTECODE="1", PYDEVD_DISABLE_FILE_VALIDATION="1",
               COURSE_KIT_GRADE_MEMORY=str(limits.memory_bytes + (1 << 30) if limits.memory_bytes else 0))
    return env


def execute(plan: Plan, scratch_root: Path, limits: Limits, uid: int | None,
            files: dict[str, str] | None = None) -> tuple[dict, bool, str]:
    """Run the plan's notebook; return (records by code-cell index, total timeout hit, log tail).
    `files` (name -> text) are copied into the kernel's scratch folder, its working directory."""
    job, control, work = sandbox.make_job_dir(scratch_root)
    try:
        for name, text in (files or {}).items():
            (work / Path(name).name).write_text(text)
        nb_path = control / "graded.ipynb"
        nb_path.write_text(nbformat.writes(plan.notebook))
        (control / "pytest.ini").write_text("[pytest]\n")
        _kernelspec(control, work, uid, limits)
        cmd = [sys.executable, "-m", "course_kit.grading._pytest_main", "--nbval-lax", "--nbval-kernel-name", KERNEL_NAME,
               "--nbval-cell-timeout", str(limits.cell_timeout),
               "--nbval-kernel-startup-timeout", str(min(120.0, limits.total_timeout)),
               "-p", "course_kit.grading._nbplugin", "-p", "no:cacheprovider", "-q", "--no-header",
               "-c", str(control / "pytest.ini"), "--rootdir", str(control), str(nb_path)]
        timed_out = False
        with open(control / "pytest.log", "wb") as log:
            proc = subprocess.Popen(cmd, cwd=control, env=_env(control, limits), stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
            try:
                proc.wait(timeout=limits.total_timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                sandbox.kill_group(proc.pid)
                proc.wait()
                pidfile = control / "kernel.pid"
                if timed_out and pidfile.exists():  # nbval had no chance to stop the kernel
                    try:
                        sandbox.kill_group(int(pidfile.read_text().strip()))
                    except ValueError:
                        pass
                if uid is not None:
                    sandbox.kill_uid(uid)
        records: dict[int, dict] = {}
        results = control / "results.jsonl"
        if results.exists():
            for line in results.read_text().splitlines():
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue
                records[int(rec["cell"])] = rec
        tail = (control / "pytest.log").read_text(errors="replace")[-1500:]
        return records, timed_out, tail
    finally:
        sandbox.remove(job)


def _message(rec: dict) -> str:
    ename, evalue = rec.get("ename", ""), rec.get("evalue", "")
    return f"{ename}: {evalue}".strip(": ") if evalue else ename


def classify(ex: Exercise, plan: Plan, records: dict, timed_out: bool, limits: Limits,
             log_tail: str = "") -> Outcome:
    """The status of one exercise from its solution cell and its check cells' outcomes."""
    def out(status: str, message: str) -> Outcome:
        points = ex.points if status == "passed" else 0
        return Outcome(ex.id, points, ex.points, status, " ".join(message.split())[:500])

    if ex.id in plan.missing:
        return out("missing", f"no solution cell for exercise {ex.id} in the submission "
                              "(the cell was deleted or its metadata removed)")
    indices = sorted(i for i, (eid, _) in plan.roles.items() if eid == ex.id)
    for i in indices:
        role = plan.roles[i][1]
        where = "your solution cell" if role == "solution" else ("the visible check" if role == "check" else "the hidden check")
        rec = records.get(i)
        if rec is None:
            if timed_out:
                return out("timeout", f"{where} did not finish: the notebook hit its total timeout "
                                      f"of {limits.total_timeout:g} s")
            return out("error", f"{where} did not run; grader log: {log_tail[-300:]}")
        if rec["outcome"] == "timeout":
            return out("timeout", f"{where} exceeded the cell timeout of {limits.cell_timeout:g} s")
        if rec["outcome"] == "error" and "Kernel dead" in rec.get("evalue", ""):
            return out("error", f"{where} could not run: the kernel had died (an earlier cell crashed it, "
                                "or ignored the timeout's interrupt and was stopped)")
        if rec["outcome"] == "error":
            if role != "solution" and rec.get("ename") == "AssertionError":
                return out("failed", f"{where}: {_message(rec)}")
            return out("error", f"{where}: {_message(rec)}")
        if role != "solution" and plan.tokens.get(i) not in rec.get("tokens", []):
            return out("error", f"{where} finished without confirming its result "
                                "(the cell's output was intercepted)")
    return out("passed", "all checks passed")


def run(plan: Plan, exercises: list[Exercise], scratch_root: Path, limits: Limits,
        uid: int | None, files: dict[str, str] | None = None) -> list[Outcome]:
    """Grade one assembled submission: every exercise gets exactly one outcome."""
    if all(e.id in plan.missing for e in exercises):
        records, timed_out, tail = {}, False, ""
    else:
        records, timed_out, tail = execute(plan, scratch_root, limits, uid, files)
    return [classify(e, plan, records, timed_out, limits, tail) for e in exercises]
