"""Where and as whom student code runs: scratch folders, sandbox uids, and cleaning up after a run."""
from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path

# Sandbox uids/gids have no passwd entry and own nothing on the system; one per notebook run, so a
# submission can't touch another one (graded at the same time or later), and every process a run
# leaves behind can be found (by uid) and killed.
UID_BASE = 1_900_000_000


def mode() -> str:
    """'uid' when grading as root, 'bwrap' when bubblewrap is on PATH, else 'none' (limits only)."""
    if os.geteuid() == 0:
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
