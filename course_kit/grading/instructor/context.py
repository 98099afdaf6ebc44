"""What every graded run shares (used by execute.py, judging.py and runner.py): the session's
context, the sandbox's paths and environment, and how a sandboxed command is started."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from . import sandbox
from .sandbox import Limits

HOME, GRADE, DATA, HIDDEN, JUDGE = "/home/student", "/grade", "/course-data", "/hidden", "/judge"


@dataclass
class Context:
    """What every run of one grading session shares."""
    mode: sandbox.Mode
    cases: Path                  # the checks' plans (judge prepare), readable by every sandbox
    data: Path | None            # recorded results (JSON only) for the notebooks
    hidden: Path | None          # the instructor's hidden checkers (seen by the judge only)
    limits: Limits
    feedback: str = "short"
    log: Callable[[str], None] = print   # the instructor's log (never a student's feedback)
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


def env(ctx: Context, extra: dict) -> dict:
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


def spawn(ctx: Context, job: Path, command: list[str], ro: list, rw: list, env: dict, cwd: str,
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
    return sandbox.popen(run, pass_fds=pass_fds, start_new_session=True, **popen)


def drain(stream, keep: list) -> None:
    """Read a stream to its end, keeping only its last 4 KB (a flood of output costs nothing)."""
    tail = b""
    for chunk in iter(lambda: stream.read(65536), b""):
        tail = (tail + chunk)[-4096:]
    keep.append(tail.decode("utf-8", "replace"))


def python_binds() -> list[tuple[str, str]]:
    return [(p, p) for p in sandbox.python_paths()]


def new_job(scratch: Path) -> Path:
    scratch.mkdir(parents=True, exist_ok=True)
    os.chmod(scratch, 0o711)
    job = Path(tempfile.mkdtemp(prefix="job-", dir=scratch))
    os.chmod(job, 0o711)
    return job


def owned_dir(path: Path, uid: int | None) -> Path:
    path.mkdir(mode=0o700)
    if uid is not None:
        os.chown(path, uid, uid)
    return path


