"""Judge one run's recorded answers (used by runner.py): the checkers' own process
(course_kit.grading.checks.judge), in a fresh sandbox where no student code ever ran, started after
every process of the run is dead. It reads the answers as data and writes the verdicts after every
answer, so a checker stopped by its memory or time cap still leaves the verdicts it reached.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

from . import sandbox
from .assemble import Plan
from .context import HIDDEN, JUDGE, Context, drain, env, owned_dir, python_binds, spawn

__all__ = ["judge", "JUDGE_ROUNDS"]


JUDGE_ROUNDS = 3       # a judge stopped by its caps is started again on the answers it had not reached


def _judge_once(checks: list[dict], ctx: Context, job: Path, uid: int | None,
                round_: int) -> tuple[dict, str | None, str]:
    """One checker process on these checks: (verdicts it wrote, the answer it was judging when it
    stopped or None, the tail of its output)."""
    jin, jout = job / f"judge-in-{round_}", owned_dir(job / f"judge-out-{round_}", uid)
    jin.mkdir(mode=0o755)
    answers = job / "answers"
    inside = ctx.mode.kind != "none"
    (jin / "job.json").write_text(json.dumps({"answers": f"{JUDGE}/answers" if inside else str(answers),
                                              "checks": checks, "level": ctx.feedback}))
    os.chmod(jin / "job.json", 0o644)
    out = f"{JUDGE}/out/verdicts.json" if inside else str(jout / "verdicts.json")
    cmd = [sys.executable, "-m", "course_kit.grading.checks.judge", "verdict",
           "--job", f"{JUDGE}/in/job.json" if inside else str(jin / "job.json"), "--out", out]
    ro = python_binds() + [(str(answers), f"{JUDGE}/answers"), (str(jin), f"{JUDGE}/in")]
    if ctx.hidden is not None:
        ro.append((str(ctx.hidden), HIDDEN))
        cmd += ["--hidden", HIDDEN if inside else str(ctx.hidden)]
    group = sandbox.Cgroup.create(f"{job.name}-judge{round_}", ctx.limits.memory_bytes, 64, ctx.limits.cpus) \
        if ctx.mode.memory.startswith("cgroup") else None
    log: list = []
    try:
        proc = spawn(ctx, job, cmd, ro, [(str(jout), f"{JUDGE}/out")], env(ctx, {}), "/", uid, group,
                      stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        t = threading.Thread(target=drain, args=(proc.stdout, log), daemon=True)
        t.start()
        try:
            proc.wait(timeout=max(120.0, ctx.limits.cell_timeout))
        except subprocess.TimeoutExpired:
            pass
        sandbox.kill_group(proc.pid)
        proc.wait()
        t.join(5)
    finally:
        if group is not None:
            group.kill()
            group.remove()
    try:
        written = json.loads((jout / "verdicts.json").read_text())
        return dict(written["verdicts"]), written.get("judging"), "".join(log)
    except (OSError, ValueError, KeyError, TypeError):
        return {}, None, "".join(log)


def judge(plan: Plan, ctx: Context, job: Path, uid: int | None) -> dict:
    """Run the checkers on the recorded answers in a fresh sandbox; {check id: verdict}. Every check
    gets a verdict: an answer during which the checker was stopped by its memory or time cap is that
    answer's error, and a fresh checker process judges the answers after it."""
    checks = [{"id": i, "source": plan.sources.get(ex, "")} for ex, ids in plan.checks.items() for i in ids]
    verdicts: dict = {}
    left, tail = checks, ""
    for round_ in range(JUDGE_ROUNDS):
        if not left:
            break
        found, judging, tail = _judge_once(left, ctx, job, uid, round_)
        verdicts.update({k: v for k, v in found.items() if isinstance(v, dict)})
        if judging is not None and judging not in verdicts:
            verdicts[judging] = {"status": "error", "message": "the checker was stopped by its memory or time "
                                                               "cap while it judged this answer"}
        left = [c for c in left if c["id"] not in verdicts]
        if judging is None:      # it stopped before its first answer: a new one would stop the same way
            break
    if left:
        ctx.log(f"{job.name}: the checker process failed: {' '.join(tail.split())[-400:]}")
    for c in left:
        verdicts[c["id"]] = {"status": "error", "message": "the checker process failed before it judged this "
                                                           "answer (the grader's log says why)"}
    return verdicts


