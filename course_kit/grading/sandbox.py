"""Where and as whom student code runs: scratch folders, sandbox uids, and cleaning up after a run."""
from __future__ import annotations

import os
import shutil
import signal
import sys
import time
from pathlib import Path

# Sandbox uids/gids have no passwd entry and own nothing on the system; one per notebook run, so a
# submission can't touch another one (graded at the same time or later), and every process a run
# leaves behind can be found (by uid) and killed.
UID_BASE = 1_900_000_000


def world_readable(path: str) -> bool:
    """Can a user with no relation to the owner read `path` (and traverse every folder above it)?"""
    path = os.path.realpath(path)
    parts = path.split(os.sep)
    for i in range(2, len(parts)):
        if not os.stat(os.sep.join(parts[:i]) or os.sep).st_mode & 0o001:
            return False
    return bool(os.stat(path).st_mode & 0o004)


def needed_paths() -> list[str]:
    """What the kernel must read: the interpreter, the standard library, site-packages, course_kit."""
    import sysconfig

    import course_kit
    paths = sysconfig.get_paths()
    return [sys.executable, paths["stdlib"], paths["purelib"], paths["platlib"],
            os.path.dirname(course_kit.__file__)]


def drop_method() -> str | None:
    """How a root grader becomes the sandbox uid: plain setuid when Python and course_kit are
    readable by anyone; else setpriv keeping only the capability to read (never to write); else None."""
    if all(world_readable(p) for p in needed_paths()):
        return "setuid"
    return "setpriv" if shutil.which("setpriv") else None


def mode() -> str:
    """'uid' when grading as root (and able to drop to a sandbox uid), 'bwrap' when bubblewrap is on
    PATH, else 'none' (resource limits only)."""
    if os.geteuid() == 0 and drop_method() is not None:
        return "uid"
    return "bwrap" if shutil.which("bwrap") else "none"


def make_job_dir(scratch_root: Path) -> tuple[Path, Path, Path]:
    """A fresh job folder: control/ (grader only) and work/ (the student's scratch copy)."""
    import tempfile
    scratch_root.mkdir(parents=True, exist_ok=True)
    job = Path(tempfile.mkdtemp(prefix="job-", dir=scratch_root))
    os.chmod(scratch_root, 0o711)  # traversable but not listable by the sandbox uid
    os.chmod(job, 0o711)
    control, work = job / "control", job / "work"
    control.mkdir(mode=0o700)
    work.mkdir(mode=0o700)
    return job, control, work


def pids_of_uid(uid: int) -> list[int]:
    """Live (not zombie) processes whose real uid is `uid`."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
        except OSError:
            continue
        if fields.get("State", "").strip().startswith(("Z", "X")):
            continue
        try:
            if int(fields.get("Uid", "-1").split()[0]) == uid:
                pids.append(int(entry))
        except ValueError:
            continue
    return pids


def kill_uid(uid: int, rounds: int = 40) -> None:
    """SIGKILL every process of a sandbox uid, until none is left (some may be forking)."""
    if uid < UID_BASE or os.geteuid() != 0:
        return
    for _ in range(rounds):
        pids = pids_of_uid(uid)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)


def kill_group(pid: int) -> None:
    """SIGKILL a process group led by pid (the grader's pytest, or the kernel's own session)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def remove(job: Path) -> None:
    shutil.rmtree(job, ignore_errors=True)
