"""One graded run's cgroup(s): memory, process and CPU caps for its whole tree, and a kill of all of it.

cgroup v2 where the grader's own cgroup delegates the controllers, else v1 (one folder per
controller); `Cgroup.create` returns None where neither can be made (not root, read-only), and the
sandbox falls back to per-process limits. The CPU cap (v2 `cpu.max`, v1 `cpu.cfs_quota_us`) is
optional: where no cpu controller can be used, the run has memory and process caps only, and
`Cgroup.cpu` is False (the grader's log says so once).
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

PERIOD_US = 100_000      # the CFS period the CPU quota is a fraction of


def _own_cgroup(controller: str | None) -> str | None:
    """This process's cgroup path for a v1 controller, or the v2 path (controller None)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        num, ctrls, path = line.split(":", 2)
        if controller is None and num == "0" and ctrls == "":
            return path
        if controller is not None and controller in ctrls.split(","):
            return path
    return None


def _mount_of(fstype: str, option: str | None) -> str | None:
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return None
    for line in mounts:
        parts = line.split()
        if len(parts) >= 4 and parts[2] == fstype and (option is None or option in parts[3].split(",")):
            return parts[1]
    return None


def _quota(cpus: float) -> int:
    return max(1000, int(cpus * PERIOD_US))     # the kernel refuses quotas under 1 ms


class Cgroup:
    """One run's cgroup(s): memory, process and (where possible) CPU caps for its whole tree."""

    def __init__(self, dirs: list[Path], version: int, cpu: bool = False):
        self.dirs, self.version, self.cpu = dirs, version, cpu

    @property
    def procs(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs]

    @staticmethod
    def create(name: str, memory: int, pids: int, cpus: float | None = None) -> "Cgroup | None":
        """A fresh cgroup with these caps (cpus: CPUs' worth of time per period, None for no CPU cap),
        or None where none can be made."""
        if os.geteuid() != 0:
            return None
        for make in (Cgroup._v2, Cgroup._v1):
            try:
                group = make(name, memory, pids, cpus)
            except OSError:
                group = None
            if group is not None:
                return group
        return None

    @staticmethod
    def _v2(name: str, memory: int, pids: int, cpus: float | None) -> "Cgroup | None":
        mount, own = _mount_of("cgroup2", None), _own_cgroup(None)
        if mount is None or own is None:
            return None
        parent = Path(mount) / own.lstrip("/")
        enabled = (parent / "cgroup.subtree_control").read_text().split()
        if "memory" not in enabled or "pids" not in enabled:
            return None
        d = parent / name
        d.mkdir()
        group = Cgroup([d], 2)
        try:
            if memory:
                (d / "memory.max").write_text(str(memory))
                if (d / "memory.swap.max").exists():
                    (d / "memory.swap.max").write_text("0")
            (d / "pids.max").write_text(str(pids))
        except OSError:
            group.remove()
            return None
        if cpus and "cpu" in enabled:
            try:
                (d / "cpu.max").write_text(f"{_quota(cpus)} {PERIOD_US}")
                group.cpu = True
            except OSError:
                pass
        return group

    @staticmethod
    def _v1(name: str, memory: int, pids: int, cpus: float | None) -> "Cgroup | None":
        dirs = []
        for ctrl in ("memory", "pids"):
            mount, own = _mount_of("cgroup", ctrl), _own_cgroup(ctrl)
            if mount is None or own is None:
                break
            d = Path(mount) / own.lstrip("/") / name
            try:
                d.mkdir()
            except OSError:
                break
            dirs.append(d)
        group = Cgroup(dirs, 1)
        if len(dirs) != 2:
            group.remove()
            return None
        try:
            mem, pid = dirs
            if memory:
                (mem / "memory.limit_in_bytes").write_text(str(memory))
                if (mem / "memory.memsw.limit_in_bytes").exists():
                    try:
                        (mem / "memory.memsw.limit_in_bytes").write_text(str(memory))
                    except OSError:
                        pass
            (pid / "pids.max").write_text(str(pids))
        except OSError:
            group.remove()
            return None
        if cpus:
            group._v1_cpu(name, cpus)
        return group

    def _v1_cpu(self, name: str, cpus: float) -> None:
        mount, own = _mount_of("cgroup", "cpu"), _own_cgroup("cpu")
        if mount is None or own is None:
            return
        d = Path(mount) / own.lstrip("/") / name
        try:
            d.mkdir()
        except OSError:
            return
        try:
            (d / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (d / "cpu.cfs_quota_us").write_text(str(_quota(cpus)))
        except OSError:
            d.rmdir()
            return
        self.dirs.append(d)
        self.cpu = True

    def pids(self) -> set[int]:
        found = set()
        for procs in self.procs:
            try:
                found |= {int(p) for p in Path(procs).read_text().split()}
            except (OSError, ValueError):
                pass
        return found

    def kill(self, rounds: int = 100) -> None:
        """SIGKILL every process in the cgroup until none is left (some may be forking)."""
        if self.version == 2 and (self.dirs[0] / "cgroup.kill").exists():
            try:
                (self.dirs[0] / "cgroup.kill").write_text("1")
            except OSError:
                pass
        for _ in range(rounds):
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(0.02)

    def oom_killed(self) -> bool:
        """Did the memory cap stop a process of this run?"""
        try:
            if self.version == 2:
                events = (self.dirs[0] / "memory.events").read_text()
                return any(line.split()[0] == "oom_kill" and int(line.split()[1]) > 0
                           for line in events.splitlines())
            control = (self.dirs[0] / "memory.oom_control").read_text()
            kills = [int(line.split()[1]) for line in control.splitlines() if line.startswith("oom_kill ")]
            if kills:
                return kills[0] > 0
            return int((self.dirs[0] / "memory.failcnt").read_text()) > 0
        except (OSError, ValueError, IndexError):
            return False

    def remove(self) -> None:
        for d in self.dirs:
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    self.kill(rounds=5)
                    time.sleep(0.02)
