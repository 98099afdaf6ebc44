"""One graded notebook: run its cells in a sandbox, then judge the recorded answers in another.

The kernel's replies (kernel.py) only pace the run and word error messages. The verdict of an
exercise comes from the checker's process (checks/judge.py), started in a fresh sandbox after
every process of the student's run is dead, reading the answers the run wrote as data.
"""
from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import sandbox
from .assemble import Plan
from .cells import Exercise
from .sandbox import Limits

STATUSES = ("passed", "failed", "error", "timeout", "missing")
HOME, GRADE, DATA, HIDDEN, JUDGE = "/home/student", "/grade", "/course-data", "/hidden", "/judge"


@dataclass
class Outcome:
    exercise: str
    points: float
    max_points: float
    status: str
    message: str


@dataclass
class Context:
    """What every run of one grading session shares."""
    mode: sandbox.Mode
    cases: Path                  # the checks' plans (judge prepare), readable by every sandbox
    data: Path | None            # recorded results (JSON only) for the notebooks
    hidden: Path | None          # the instructor's hidden checkers (seen by the judge only)
    limits: Limits
    feedback: str = "short"
    uids: range = field(default_factory=sandbox.session_uids)
    counter: list = field(default_factory=lambda: [0])
    lock: threading.Lock = field(default_factory=threading.Lock)

    def next_uid(self) -> int | None:
        if self.mode.kind != "bwrap-uid":
            return None
        with self.lock:
            self.counter[0] += 1
            return self.uids[self.counter[0] % len(self.uids)]


@dataclass
class Event:
    status: str            # ok | error | timeout | died | stopped | total
    ename: str = ""
    evalue: str = ""


def _env(ctx: Context, extra: dict) -> dict:
    threads = str(ctx.limits.threads)
    env = {"PATH": f"{sys.prefix}/bin:/usr/bin:/bin", "HOME": HOME, "TMPDIR": "/tmp", "LANG": "C.UTF-8",
           "USER": "student", "LOGNAME": "student", "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads,
           "OPENBLAS_NUM_THREADS": threads, "TORCH_NUM_THREADS": threads, "MALLOC_ARENA_MAX": "2",
           "PYTHONDONTWRITEBYTECODE": "1", "MPLBACKEND": "Agg", "PLOTLY_RENDERER": "json",
           "COURSE_KIT_SMOKE": os.environ.get("COURSE_KIT_SMOKE", "1"), "GLOO_SOCKET_IFNAME": "lo"}
    # The very package the grader runs, whatever the venv's editable finder points at (a worktree's
    # package lies outside the venv's own path, and only the package folder is bound).
    env["PYTHONPATH"] = str(Path(sandbox.package_dir()).parent)
    if ctx.data is not None:
        env["COURSE_KIT_DATA"] = DATA
    env.update(extra)
    return env


def _spawn(ctx: Context, job: Path, command: list[str], ro: list, rw: list, env: dict, cwd: str,
           uid: int | None, group: sandbox.Cgroup | None, pass_fds=(), tmpfs=(), **popen) -> subprocess.Popen:
    if ctx.mode.kind == "none":   # --trusted: no sandbox, only the per-process limits
        run = sandbox.Run(command, env, None)
        popen["preexec_fn"] = sandbox.preexec_limits(ctx.limits)
        cwd_real = next((src for src, dst in rw if dst == cwd), cwd)
        return subprocess.Popen(run.argv, env=run.env, cwd=cwd_real, pass_fds=pass_fds,
                                start_new_session=True, **popen)
    run = sandbox.command(job, command, ro=ro, rw=rw, env=env, cwd=cwd, limits=ctx.limits, uid=uid,
                          cgroup=group, tmpfs=tmpfs)
    if uid is None:
        popen["preexec_fn"] = sandbox.preexec_limits(ctx.limits)
    return subprocess.Popen(run.argv, env=run.env if uid is None else {}, pass_fds=pass_fds,
                            start_new_session=True, **popen)


def _drain(stream, keep: list) -> None:
    """Read a stream to its end, keeping only its last 4 KB (a flood of output costs nothing)."""
    tail = b""
    for chunk in iter(lambda: stream.read(65536), b""):
        tail = (tail + chunk)[-4096:]
    keep.append(tail.decode("utf-8", "replace"))


def _replies(fd: int, inbox: "queue.Queue") -> None:
    with os.fdopen(fd, "rb") as f:
        while True:
            line = f.readline(65536)
            if not line:
                break
            try:
                msg = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError):
                continue
            if isinstance(msg, dict):
                inbox.put(msg)
    inbox.put(None)  # end of file: the kernel is gone


def _python_binds() -> list[tuple[str, str]]:
    return [(p, p) for p in sandbox.python_paths()]


def _new_job(scratch: Path) -> Path:
    scratch.mkdir(parents=True, exist_ok=True)
    os.chmod(scratch, 0o711)
    job = Path(tempfile.mkdtemp(prefix="job-", dir=scratch))
    os.chmod(job, 0o711)
    return job


def _owned_dir(path: Path, uid: int | None) -> Path:
    path.mkdir(mode=0o700)
    if uid is not None:
        os.chown(path, uid, uid)
    return path


def execute(plan: Plan, files: dict[str, str], ctx: Context, job: Path, uid: int | None,
            group: sandbox.Cgroup | None) -> tuple[dict[int, Event], bool]:
    """Run the plan's cells; return (event per step index, whether the memory cap struck)."""
    limits = ctx.limits
    work, answers = _owned_dir(job / "work", uid), _owned_dir(job / "answers", uid)
    os.chmod(work, 0o711)   # reachable (not listable) for the bind of the notebook into the sandbox
    for name, text in files.items():
        (work / Path(name).name).write_text(text)
        if uid is not None:
            os.chown(work / Path(name).name, uid, uid)
    # The home folder is a tmpfs (its size counts against the memory cap) holding the submitted
    # notebook read-only; only the answers folder is written to disk.
    ro = _python_binds() + [(str(ctx.cases), f"{GRADE}/cases")] + \
        [(str(work / Path(name).name), f"{HOME}/{Path(name).name}") for name in files]
    if ctx.data is not None:
        ro.append((str(ctx.data), DATA))
    rw = [(str(answers), f"{GRADE}/answers")]
    reply_r, reply_w = os.pipe()
    cmd = [sys.executable, "-m", "course_kit.grading.instructor.kernel", str(reply_w)]
    env = _env(ctx, {"COURSE_KIT_GRADE": GRADE if ctx.mode.kind != "none" else str(job / "grade")})
    if ctx.mode.kind == "none":   # no binds: point the run at real folders
        (job / "grade").mkdir()
        os.symlink(ctx.cases, job / "grade" / "cases")
        os.symlink(answers, job / "grade" / "answers")
        env.update(HOME=str(work), COURSE_KIT_DATA=str(ctx.data) if ctx.data else "", TMPDIR=str(work))
    if ctx.mode.kind == "none":
        rw.append((str(work), HOME))
    proc = _spawn(ctx, job, cmd, ro, rw, env, HOME, uid, group, pass_fds=(reply_w,), tmpfs=(HOME,),
                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    os.close(reply_w)
    inbox: "queue.Queue" = queue.Queue()
    tail: list = []
    threading.Thread(target=_replies, args=(reply_r, inbox), daemon=True).start()
    threading.Thread(target=_drain, args=(proc.stdout, tail), daemon=True).start()
    events: dict[int, Event] = {}
    deadline = time.monotonic() + limits.total_timeout

    def wait(cell: int | None, seconds: float) -> dict | None | str:
        end = time.monotonic() + max(0.0, seconds)
        while True:
            try:
                msg = inbox.get(timeout=max(0.01, end - time.monotonic()))
            except queue.Empty:
                return "timeout"
            if msg is None:
                return None
            if cell is None and msg.get("ready") or cell is not None and msg.get("cell") == cell:
                return msg
            if time.monotonic() >= end:
                return "timeout"

    def send(obj: dict) -> bool:
        try:
            proc.stdin.write((json.dumps(obj) + "\n").encode())
            proc.stdin.flush()
            return True
        except (BrokenPipeError, OSError, ValueError):
            return False

    try:
        ready = wait(None, min(120.0, limits.total_timeout))
        if not isinstance(ready, dict):
            status = "total" if ready == "timeout" else "died"
            for i in range(len(plan.steps)):
                events[i] = Event(status, evalue=("the kernel did not start: " + "".join(tail)[-200:]
                                                  if status == "died" else ""))
            return events, bool(group and group.oom_killed())
        for i, step in enumerate(plan.steps):
            left = deadline - time.monotonic()
            if left <= 0 or not send({"cell": i, "code": step.code}):
                reason = "total" if left <= 0 else "died"
                for j in range(i, len(plan.steps)):
                    events[j] = Event(reason)
                break
            reply = wait(i, min(limits.cell_timeout, left))
            if reply == "timeout":
                send({"interrupt": True})
                late = wait(i, 2.0)
                total = limits.cell_timeout > left
                events[i] = Event("total" if total else "timeout")
                if not isinstance(late, dict):  # the cell ignored the interrupt: stop the whole run
                    for j in range(i + 1, len(plan.steps)):
                        events[j] = Event("total" if total else "stopped", evalue=str(i))
                    break
                continue
            if reply is None:
                for j in range(i, len(plan.steps)):
                    events[j] = Event("died", evalue=str(i))
                break
            events[i] = Event(str(reply.get("status")), str(reply.get("ename", ""))[:80],
                              str(reply.get("evalue", ""))[:300])
    finally:
        try:
            proc.stdin.close()   # the driver exits on end of input; bubblewrap then exits cleanly
        except OSError:
            pass
        try:
            proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            pass
        sandbox.kill_group(proc.pid)
        if group is not None:
            group.kill()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
    return events, bool(group and group.oom_killed())


def judge(plan: Plan, ctx: Context, job: Path, uid: int | None) -> dict:
    """Run the checkers on the recorded answers in a fresh sandbox; {check id: verdict}."""
    checks = [{"id": i, "source": plan.sources.get(ex, "")} for ex, ids in plan.checks.items() for i in ids]
    if not checks:
        return {}
    jin, jout = job / "judge-in", _owned_dir(job / "judge-out", uid)
    jin.mkdir(mode=0o755)
    answers = job / "answers"
    inside = ctx.mode.kind != "none"
    (jin / "job.json").write_text(json.dumps({"answers": f"{JUDGE}/answers" if inside else str(answers),
                                              "checks": checks, "level": ctx.feedback}))
    os.chmod(jin / "job.json", 0o644)
    out = f"{JUDGE}/out/verdicts.json" if inside else str(jout / "verdicts.json")
    cmd = [sys.executable, "-m", "course_kit.grading.checks.judge", "verdict",
           "--job", f"{JUDGE}/in/job.json" if inside else str(jin / "job.json"), "--out", out]
    ro = _python_binds() + [(str(answers), f"{JUDGE}/answers"), (str(jin), f"{JUDGE}/in")]
    if ctx.hidden is not None:
        ro.append((str(ctx.hidden), HIDDEN))
        cmd += ["--hidden", HIDDEN if inside else str(ctx.hidden)]
    group = sandbox.Cgroup.create(f"{job.name}-judge", ctx.limits.memory_bytes, 64) \
        if ctx.mode.memory.startswith("cgroup") else None
    log: list = []
    try:
        proc = _spawn(ctx, job, cmd, ro, [(str(jout), f"{JUDGE}/out")], _env(ctx, {}), "/", uid, group,
                      stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        t = threading.Thread(target=_drain, args=(proc.stdout, log), daemon=True)
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
        return json.loads((jout / "verdicts.json").read_text())["verdicts"]
    except (OSError, ValueError, KeyError):
        raise RuntimeError(f"the checker process failed: {''.join(log)[-300:]}") from None


def classify(ex: Exercise, plan: Plan, events: dict[int, Event], verdicts: dict, limits: Limits,
             oom: bool) -> Outcome:
    """The status of one exercise from its checks' verdicts, and from the run's events where a
    check recorded no answer (which can only lose points, never give them)."""
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
                    cap = " (the run exceeded its memory cap)" if oom else ""
                    start = f" ({e.evalue})" if e.evalue.startswith("the kernel did not start") else ""
                    return out("error", f"kernel died{cap}: {where} could not finish{start}")
                if e.status == "stopped":
                    return out("error", f"not run: an earlier cell ran past the timeout and ignored the "
                                        "interrupt, so the run was stopped")
                message = f"{e.ename}: {e.evalue}".strip(": ") if e.evalue else e.ename
                if oom and e.ename == "MemoryError":
                    message += " (the run exceeded its memory cap)"
                return out("error", f"{where}: {message}")
            return out("error", "the check recorded no answer")
        return out(v["status"] if v["status"] in STATUSES else "error", str(v.get("message", "")))
    return out("passed", "all checks passed")


def run(plan: Plan, exercises: list[Exercise], files: dict[str, str], ctx: Context,
        scratch: Path) -> list[Outcome]:
    """Grade one assembled submission: every exercise gets exactly one outcome; the scratch folder
    and the cgroup are removed whatever happens."""
    if not plan.checks:
        return [classify(e, plan, {}, {}, ctx.limits, False) for e in exercises]
    job = _new_job(scratch)
    uid = ctx.next_uid()
    group = sandbox.Cgroup.create(job.name, ctx.limits.memory_bytes, ctx.limits.processes) \
        if ctx.mode.memory.startswith("cgroup") else None
    try:
        events, oom = execute(plan, files, ctx, job, uid, group)
        verdicts = judge(plan, ctx, job, uid)
        return [classify(e, plan, events, verdicts, ctx.limits, oom) for e in exercises]
    finally:
        if group is not None:
            group.kill()
            group.remove()
        shutil.rmtree(job, ignore_errors=True)
