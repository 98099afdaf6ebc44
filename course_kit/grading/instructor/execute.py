"""Run one submission's cells in its sandbox (used by runner.py): the kernel driver (kernel.py)
gets one cell at a time, and its replies only pace the run and word error messages.

What the run may write is capped (disk.py): its answers folder is a size-limited tmpfs where the
grader may mount one, else it is watched and the run is stopped when it passes the cap.
"""
from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

from . import disk, sandbox
from .assemble import Plan
from .context import DATA, GRADE, HOME, Context, Event, drain, env, owned_dir, python_binds, spawn
from .sandbox import Limits

__all__ = ["execute"]


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


class Kernel:
    """The sandboxed kernel driver of one run: send a cell, wait for its reply."""

    def __init__(self, proc: subprocess.Popen, reply_fd: int):
        self.proc, self.inbox, self.tail = proc, queue.Queue(), []
        threading.Thread(target=_replies, args=(reply_fd, self.inbox), daemon=True).start()
        threading.Thread(target=drain, args=(proc.stdout, self.tail), daemon=True).start()

    def wait(self, cell: int | None, seconds: float) -> dict | None | str:
        """The reply for `cell` (or the ready message), None if the kernel is gone, or "timeout"."""
        end = time.monotonic() + max(0.0, seconds)
        while True:
            try:
                msg = self.inbox.get(timeout=max(0.01, end - time.monotonic()))
            except queue.Empty:
                return "timeout"
            if msg is None:
                return None
            if cell is None and msg.get("ready") or cell is not None and msg.get("cell") == cell:
                return msg
            if time.monotonic() >= end:
                return "timeout"

    def send(self, obj: dict) -> bool:
        try:
            self.proc.stdin.write((json.dumps(obj) + "\n").encode())
            self.proc.stdin.flush()
            return True
        except (BrokenPipeError, OSError, ValueError):
            return False


def _start(files: dict[str, str], ctx: Context, job: Path, answers: Path, uid: int | None,
           group: sandbox.Cgroup | None) -> Kernel:
    """Write the submitted notebook into the job and start the kernel driver in the sandbox."""
    work = owned_dir(job / "work", uid)
    os.chmod(work, 0o711)   # reachable (not listable) for the bind of the notebook into the sandbox
    for name in files:
        (work / Path(name).name).write_text(files[name])
        if uid is not None:
            os.chown(work / Path(name).name, uid, uid)
    # The home folder is a tmpfs (in memory, size-capped) holding the submitted notebook read-only;
    # the answers folder is the one the checkers read afterwards.
    ro = python_binds() + [(str(ctx.cases), f"{GRADE}/cases")] + \
        [(str(work / Path(name).name), f"{HOME}/{Path(name).name}") for name in files]
    if ctx.data is not None:
        ro.append((str(ctx.data), DATA))
    rw = [(str(answers), f"{GRADE}/answers")]
    reply_r, reply_w = os.pipe()
    cmd = [sys.executable, "-m", "course_kit.grading.instructor.kernel", str(reply_w)]
    environ = env(ctx, {"COURSE_KIT_GRADE": GRADE if ctx.mode.kind != "none" else str(job / "grade")})
    if ctx.mode.kind == "none":   # --trusted, no binds: point the run at real folders
        (job / "grade").mkdir()
        os.symlink(ctx.cases, job / "grade" / "cases")
        os.symlink(answers, job / "grade" / "answers")
        environ.update(HOME=str(work), COURSE_KIT_DATA=str(ctx.data) if ctx.data else "", TMPDIR=str(work))
        rw.append((str(work), HOME))
    proc = spawn(ctx, job, cmd, ro, rw, environ, HOME, uid, group, pass_fds=(reply_w,), tmpfs=(HOME,),
                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    os.close(reply_w)
    return Kernel(proc, reply_r)


def _drive(plan: Plan, kernel: Kernel, limits: Limits) -> dict[int, Event]:
    """Send the plan's cells one by one; the event of every step (a cell past its timeout is
    interrupted, and a cell that ignores the interrupt stops the run)."""
    events: dict[int, Event] = {}
    deadline = time.monotonic() + limits.total_timeout
    ready = kernel.wait(None, min(120.0, limits.total_timeout))
    if not isinstance(ready, dict):
        status = "total" if ready == "timeout" else "died"
        why = "the kernel did not start: " + "".join(kernel.tail)[-200:] if status == "died" else ""
        return {i: Event(status, evalue=why) for i in range(len(plan.steps))}
    for i, step in enumerate(plan.steps):
        left = deadline - time.monotonic()
        if left <= 0 or not kernel.send({"cell": i, "code": step.code}):
            events.update({j: Event("total" if left <= 0 else "died") for j in range(i, len(plan.steps))})
            break
        reply = kernel.wait(i, min(limits.cell_timeout, left))
        if reply == "timeout":
            kernel.send({"interrupt": True})
            late = kernel.wait(i, 2.0)
            total = limits.cell_timeout > left
            events[i] = Event("total" if total else "timeout")
            if not isinstance(late, dict):  # the cell ignored the interrupt: stop the whole run
                events.update({j: Event("total" if total else "stopped", evalue=str(i))
                               for j in range(i + 1, len(plan.steps))})
                break
            continue
        if reply is None:
            events.update({j: Event("died", evalue=str(i)) for j in range(i, len(plan.steps))})
            break
        events[i] = Event(str(reply.get("status")), str(reply.get("ename", ""))[:80], str(reply.get("evalue", ""))[:300])
    return events


def _stop(kernel: Kernel, group: sandbox.Cgroup | None) -> None:
    try:
        kernel.proc.stdin.close()   # the driver exits on end of input; bubblewrap then exits cleanly
    except OSError:
        pass
    try:
        kernel.proc.wait(timeout=2)
    except subprocess.TimeoutExpired:
        pass
    sandbox.kill_group(kernel.proc.pid)
    if group is not None:
        group.kill()
    try:
        kernel.proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass


def execute(plan: Plan, files: dict[str, str], ctx: Context, job: Path, uid: int | None,
            group: sandbox.Cgroup | None) -> tuple[dict[int, Event], str]:
    """Run the plan's cells; return (event per step index, the cap that stopped the run: "memory cap",
    "disk cap" or ""). The caller unmounts job/answers (disk.release_folder) after judging."""
    answers = owned_dir(job / "answers", uid)
    limited = disk.limit_folder(answers, ctx.limits.disk_bytes, uid)
    kernel = _start(files, ctx, job, answers, uid, group)
    watch = None
    if not limited:    # no tmpfs here: past the cap, the run is stopped, whatever it is doing
        watch = disk.Watch(answers, ctx.limits.disk_bytes,
                           lambda: (sandbox.kill_group(kernel.proc.pid), group.kill() if group else None))
    try:
        events = _drive(plan, kernel, ctx.limits)
    finally:
        _stop(kernel, group)
        if watch is not None:
            watch.stop()
    struck = "memory cap" if group and group.oom_killed() else "disk cap" if watch and watch.struck else ""
    return events, struck
