"""One graded notebook: run its cells in a sandbox (execute.py), then judge the recorded answers in
another (judging.py), and turn events and verdicts into one outcome per exercise.

The kernel's replies only pace the run and word error messages. The verdict of an exercise comes
from the checker's process (checks/judge.py), started in a fresh sandbox after every process of the
student's run is dead, reading the answers the run wrote as data.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from . import disk, sandbox
from .assemble import Plan
from .cells import Exercise
from .context import Context, Event, new_job
from .execute import execute
from .judging import judge
from .sandbox import Limits

__all__ = ["Context", "Event", "Outcome", "STATUSES", "classify", "run"]

STATUSES = ("passed", "failed", "error", "timeout", "missing")


@dataclass
class Outcome:
    exercise: str
    points: float
    max_points: float
    status: str
    message: str


def classify(ex: Exercise, plan: Plan, events: dict[int, Event], verdicts: dict, limits: Limits,
             struck: str = "") -> Outcome:
    """The status of one exercise from its checks' verdicts, and from the run's events where a
    check recorded no answer (which can only lose points, never give them). struck: the cap that
    stopped the run ("memory cap", "disk cap"), if any."""
    def out(status: str, message: str) -> Outcome:
        printable = "".join(ch if ch.isprintable() else " " for ch in message)  # no terminal escapes
        return Outcome(ex.id, ex.points if status == "passed" else 0, ex.points, status,
                       " ".join(printable.split())[:400])

    if ex.id in plan.duplicated:
        return out("error", f"two cells carry the solution metadata of {ex.id}: delete one, or clear the "
                            "metadata of the copy")
    if ex.id in plan.missing:
        return out("missing", f"no solution cell for exercise {ex.id} in the submission "
                              "(the cell was deleted or its metadata removed)")
    steps = [i for i, s in enumerate(plan.steps) if s.exercise == ex.id]
    names = {"solution": "your solution cell", "check": "the check", "hidden": "the hidden check"}
    for check_id in plan.checks.get(ex.id, []):
        v = verdicts.get(check_id, {"status": "none"})
        if v.get("status") in ("passed", "none"):
            if v.get("status") == "passed":
                continue
            # no answer: say why from the run's events (the first step of this exercise that failed)
            for i in steps:
                e = events.get(i, Event("died"))
                where = names.get(plan.steps[i].role, "a cell")
                if e.status == "ok":
                    continue
                if e.status == "timeout":
                    return out("timeout", f"{where} exceeded the cell timeout of {limits.cell_timeout:g} s")
                if e.status == "total":
                    return out("timeout", f"{where} did not finish: the notebook hit its total timeout of "
                                          f"{limits.total_timeout:g} s")
                if e.status == "died":
                    cap = f" (the run exceeded its {struck})" if struck else ""
                    start = f" ({e.evalue})" if e.evalue.startswith("the kernel did not start") else ""
                    return out("error", f"kernel died{cap}: {where} could not finish{start}")
                if e.status == "stopped":
                    return out("error", f"not run: an earlier cell ran past the timeout and ignored the "
                                        "interrupt, so the run was stopped")
                message = f"{e.ename}: {e.evalue}".strip(": ") if e.evalue else e.ename
                if struck and e.ename in ("MemoryError", "OSError"):
                    message += f" (the run exceeded its {struck})"
                return out("error", f"{where}: {message}")
            return out("error", "the check recorded no answer")
        return out(v["status"] if v["status"] in STATUSES else "error", str(v.get("message", "")))
    return out("passed", "all checks passed")


def run(plan: Plan, exercises: list[Exercise], files: dict[str, str], ctx: Context,
        scratch: Path) -> list[Outcome]:
    """Grade one assembled submission: every exercise gets exactly one outcome; the scratch folder,
    its size-limited answers folder and the cgroup are removed whatever happens."""
    if not plan.checks:
        return [classify(e, plan, {}, {}, ctx.limits) for e in exercises]
    job = new_job(scratch)
    uid = ctx.next_uid()
    limits = ctx.limits
    group = sandbox.Cgroup.create(job.name, limits.memory_bytes, limits.processes, limits.cpus) \
        if ctx.mode.memory.startswith("cgroup") else None
    try:
        events, struck = execute(plan, files, ctx, job, uid, group)
        verdicts = judge(plan, ctx, job, uid)
        return [classify(e, plan, events, verdicts, limits, struck) for e in exercises]
    finally:
        if group is not None:
            group.kill()
            group.remove()
        disk.release_folder(job / "answers")
        shutil.rmtree(job, ignore_errors=True)
