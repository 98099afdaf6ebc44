"""Is the GPU quiet? What `course-kit record` checks before each notebook, and stamps in its copy.

DESIGN.md: a recorded run is alone on its GPU. Before a notebook runs, `check()` asks `nvidia-smi`
which compute processes hold the GPU (`--query-compute-apps`) and how busy it is (`utilization.gpu`);
this process and its children do not count. A GPU is busy when another process computes on it or its
utilisation is above `BUSY_UTIL_PCT`; the record refuses then, unless told otherwise, and waits a few
seconds first (the previous notebook's kernel may still be exiting). `lock()` keeps two `course-kit
record` runs on one machine from overlapping: one notebook at a time, on a GPU nothing else uses.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Iterator

BUSY_UTIL_PCT = 10          # above this utilisation, with no process of ours on it, the GPU is busy
LOCK = Path(tempfile.gettempdir()) / "course-kit-record.lock"


class Busy(RuntimeError):
    """The GPU is in use by something else; the message says by what."""


def _smi(*query: str) -> list[list[str]] | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, *query, "--format=csv,noheader,nounits"], capture_output=True, text=True,
                             timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return [[c.strip() for c in line.split(",")] for line in out.splitlines() if line.strip()]


def _ours() -> set[int]:
    """This process and its descendants (a notebook's kernel is one)."""
    pids, frontier = {os.getpid()}, [os.getpid()]
    while frontier:
        pid = frontier.pop()
        try:
            kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            continue
        for k in map(int, kids):
            if k not in pids:
                pids.add(k)
                frontier.append(k)
    return pids


def check() -> dict:
    """The GPU's state now: other compute processes, utilisation per GPU, and whether it is quiet."""
    apps = _smi("--query-compute-apps=pid,process_name,used_memory")
    gpus = _smi("--query-gpu=index,name,utilization.gpu,memory.used")
    when = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    if apps is None or gpus is None:
        return {"checked_at": when, "nvidia_smi": False, "quiet": True,
                "note": "no nvidia-smi here (a CPU machine): nothing to share a GPU with"}
    ours = _ours()
    others = [{"pid": int(a[0]), "name": a[1], "used_mib": a[2]} for a in apps
              if a and a[0].isdigit() and int(a[0]) not in ours]
    util = [{"index": int(g[0]), "name": g[1], "utilization_pct": _num(g[2]), "memory_used_mib": _num(g[3])}
            for g in gpus if g and g[0].isdigit()]
    busy_util = [g for g in util if (g["utilization_pct"] or 0) > BUSY_UTIL_PCT]
    return {"checked_at": when, "nvidia_smi": True, "other_processes": others, "gpus": util,
            "quiet": not others and not busy_util}


def _num(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def describe(state: dict) -> str:
    """One line: quiet, or busy with what."""
    if not state.get("nvidia_smi"):
        return state.get("note", "no GPU check")
    if state["quiet"]:
        return "GPU quiet: no other compute process, " + ", ".join(
            f"GPU {g['index']} at {g['utilization_pct']:g}%" for g in state["gpus"])
    parts = [f"pid {p['pid']} ({p['name']}, {p['used_mib']} MiB)" for p in state["other_processes"]]
    parts += [f"GPU {g['index']} at {g['utilization_pct']:g}% utilisation" for g in state["gpus"]
              if (g["utilization_pct"] or 0) > BUSY_UTIL_PCT]
    return "GPU busy: " + "; ".join(parts)


def wait_quiet(patience_s: float = 20.0, poll_s: float = 2.0) -> dict:
    """Check until the GPU is quiet or `patience_s` has passed; the last state."""
    deadline = time.monotonic() + patience_s
    state = check()
    while not state["quiet"] and time.monotonic() < deadline:
        time.sleep(poll_s)
        state = check()
    return state


@contextlib.contextmanager
def lock(path: Path = LOCK) -> Iterator[None]:
    """One `course-kit record` at a time on this machine; a second one fails at once, saying so."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            raise Busy(f"another `course-kit record` holds {path}: recordings run one at a time") from err
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
