"""The sandbox every graded notebook (and every checker run) gets: bubblewrap, uids, cgroups.

What a run gets (see README, "For instructors"):
- namespaces: user, mount, pid, network (an own loopback only), IPC, UTS; no capabilities,
  no_new_privs, no nested user namespaces, a new session (no terminal injection), and bubblewrap
  dies with the grader;
- as root, its own unprivileged host uid and gid per run (no supplementary groups);
- a file system of read-only binds of only /usr, the Python install, the package and the data the
  run needs, plus its own scratch folders read-write; private tmpfs /tmp, /var/tmp and /dev/shm;
- a memory cap and a process cap for the run's whole tree (cgroup v2, else v1, where writable),
  else per-process address-space and per-uid process limits; CPU threads through the environment;
- a kill that reaches every process: the pid namespace dies with its first process.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

UID_BASE = 1_900_000_000       # sandbox uids own nothing on the system and have no passwd entry
INNER_UID = 1000               # the uid inside the sandbox
LAUNCH = Path(__file__).resolve().with_name("launch.py")
UIDS_PER_SESSION = 100_000


def session_uids(pid: int | None = None) -> range:
    """The sandbox uids of one grading process: disjoint from other graders running at once."""
    # bubblewrap takes uids as signed 32-bit numbers: stay below 2**31
    start = UID_BASE + ((os.getpid() if pid is None else pid) % 2_000) * UIDS_PER_SESSION
    return range(start, start + UIDS_PER_SESSION)


@dataclass
class Limits:
    cell_timeout: float = 120.0      # seconds per cell (interrupt, then kill)
    total_timeout: float = 1800.0    # seconds for the whole notebook, start included
    memory_bytes: int = 8 << 30      # the whole run's memory (cgroup) or each process's (rlimit)
    threads: int = 1                 # OMP/MKL/torch threads
    processes: int = 256             # processes and threads of the run
    file_bytes: int = 256 << 20      # largest file the run may write

    def __post_init__(self) -> None:
        for name in ("cell_timeout", "total_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0 seconds, got {getattr(self, name)!r}")
        if self.memory_bytes < 0:
            raise ValueError(f"memory_bytes must be >= 0 (0 means no limit), got {self.memory_bytes}")
        if self.threads < 1 or self.processes < 8:
            raise ValueError(f"threads must be >= 1 and processes >= 8, got {self.threads}, {self.processes}")


# --- cgroups -------------------------------------------------------------------------------------

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


class Cgroup:
    """One run's cgroup(s): memory and process caps for its whole tree, and a kill of all of it."""

    def __init__(self, dirs: list[Path], version: int):
        self.dirs, self.version = dirs, version

    @property
    def procs(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs]

    @staticmethod
    def create(name: str, memory: int, pids: int) -> "Cgroup | None":
        """A fresh cgroup with these caps, or None where none can be made (not root, read-only)."""
        if os.geteuid() != 0:
            return None
        for make in (Cgroup._v2, Cgroup._v1):
            try:
                group = make(name, memory, pids)
            except OSError:
                group = None
            if group is not None:
                return group
        return None

    @staticmethod
    def _v2(name: str, memory: int, pids: int) -> "Cgroup | None":
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
        return group

    @staticmethod
    def _v1(name: str, memory: int, pids: int) -> "Cgroup | None":
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
        return group

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


# --- bubblewrap ----------------------------------------------------------------------------------

def traversable(path: str) -> bool:
    """Can any user reach `path` (search permission on every folder above it)?"""
    parts = Path(os.path.realpath(path)).parts
    for i in range(1, len(parts)):
        if not os.stat(os.path.join(*parts[:i])).st_mode & 0o001:
            return False
    return True


def package_dir() -> str:
    """The folder of the course_kit package this grader runs (found without importing lessons)."""
    return str(Path(__file__).resolve().parents[2])


def python_paths() -> list[str]:
    """The Python install the sandbox needs: the interpreter's prefix, the venv, the course package."""
    package = package_dir()
    paths = {os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix)}
    if not any(package.startswith(p + os.sep) for p in paths):
        paths.add(package)
    return sorted(paths)


def _system_args() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = f"/{name}"
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for name in ("/etc/ld.so.cache", "/etc/localtime"):
        if os.path.exists(name):
            args += ["--ro-bind", name, name]
    return args


@dataclass
class Run:
    """How to start one sandboxed command: argv for Popen and the launcher's spec (root only)."""
    argv: list[str]
    env: dict
    spec_path: Path | None


def command(job: Path, command: list[str], *, ro: list[tuple[str, str]], rw: list[tuple[str, str]],
            env: dict, cwd: str, limits: Limits, uid: int | None, cgroup: Cgroup | None,
            tmpfs: tuple[str, ...] = ()) -> Run:
    """The bubblewrap command for `command` with these binds; as root (uid given), wrapped in the
    launcher that joins the cgroup, sets limits, stages unreachable folders and drops to `uid`."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise RuntimeError("bubblewrap (bwrap) is not installed")
    args = [bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent",
            "--new-session", "--cap-drop", "ALL", "--uid", str(INNER_UID), "--gid", str(INNER_UID),
            "--hostname", "sandbox", "--proc", "/proc", "--dev", "/dev"]
    size = str(limits.memory_bytes or (1 << 30))
    for tmp in ("/tmp", "/var/tmp", "/dev/shm", *tmpfs):   # in memory: counted by the memory cap
        args += ["--size", size, "--tmpfs", tmp]
    args += _system_args()
    stage: list[list[str]] = []
    for i, (src, dst) in enumerate(ro):
        if uid is not None and not traversable(src):
            point = job / "view" / str(i)
            point.mkdir(parents=True, exist_ok=True)
            os.chmod(job / "view", 0o755)
            stage.append([src, str(point)])
            src = str(point)
        args += ["--ro-bind", src, dst]
    for src, dst in rw:
        args += ["--bind", src, dst]
    args += ["--chdir", cwd, "--"] + command
    if uid is None:
        return Run(args, env, None)
    rlimits = {"RLIMIT_NPROC": limits.processes, "RLIMIT_CORE": 0, "RLIMIT_FSIZE": limits.file_bytes}
    if cgroup is None and limits.memory_bytes:
        rlimits["RLIMIT_AS"] = limits.memory_bytes
    spec = {"argv": args, "env": env, "uid": uid, "rlimits": rlimits, "stage": stage,
            "cgroup_procs": cgroup.procs if cgroup else []}
    spec_path = job / "launch.json"
    spec_path.write_text(json.dumps(spec))
    os.chmod(spec_path, 0o600)
    return Run([sys.executable, "-I", "-S", str(LAUNCH), str(spec_path)], {}, spec_path)


def preexec_limits(limits: Limits):
    """Without root: per-process limits set in the child before bubblewrap starts."""
    def apply() -> None:
        import resource
        if limits.memory_bytes:
            resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_bytes, limits.file_bytes))
    return apply


# --- what this machine can do --------------------------------------------------------------------

@dataclass
class Mode:
    kind: str      # "bwrap-uid" (root: own uid per run), "bwrap" (the calling user's uid), "none"
    memory: str    # "cgroup v2" | "cgroup v1" | "rlimit (per process)"
    reason: str

    def describe(self) -> str:
        if self.kind == "none":
            return f"no sandbox: {self.reason}"
        who = "its own unprivileged uid per notebook" if self.kind == "bwrap-uid" else "the grader's own uid"
        return (f"bubblewrap sandbox ({who}; no network, private /tmp and IPC, read-only Python and "
                f"package); memory cap: {self.memory}")


_MODE: Mode | None = None


def mode(refresh: bool = False) -> Mode:
    """Detect (once) the best sandbox this machine allows, by starting a trivial one."""
    global _MODE
    if _MODE is not None and not refresh:
        return _MODE
    if shutil.which("bwrap") is None:
        _MODE = Mode("none", "rlimit (per process)", "bubblewrap (bwrap) is not installed "
                     "(Debian/Ubuntu: apt-get install bubblewrap)")
        return _MODE
    import tempfile
    root = os.geteuid() == 0
    group = Cgroup.create(f"course-kit-probe-{os.getpid()}", 1 << 30, 64) if root else None
    memory = {2: "cgroup v2", 1: "cgroup v1"}[group.version] if group else "rlimit (per process)"
    job = Path(tempfile.mkdtemp(prefix="course-kit-probe-"))
    os.chmod(job, 0o711)
    try:
        run = command(job, [sys.executable, "-I", "-c", "import os; print(os.getuid())"],
                      ro=[(p, p) for p in python_paths()], rw=[], env={"PATH": "/usr/bin:/bin"}, cwd="/",
                      limits=Limits(memory_bytes=2 << 30), uid=session_uids()[0] if root else None, cgroup=group)
        proc = subprocess.run(run.argv, env=run.env or None, capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL)
        ok = proc.returncode == 0 and proc.stdout.strip() == str(INNER_UID)
        reason = "" if ok else (proc.stderr.strip().splitlines() or ["bubblewrap failed"])[-1][:200]
    except (OSError, subprocess.SubprocessError, RuntimeError) as exc:
        ok, reason = False, f"{type(exc).__name__}: {exc}"
    finally:
        if group:
            group.remove()
        shutil.rmtree(job, ignore_errors=True)
    if ok:
        _MODE = Mode("bwrap-uid" if root else "bwrap", memory, "")
    else:
        _MODE = Mode("none", "rlimit (per process)", f"bubblewrap cannot make a sandbox here ({reason}); "
                     "it needs user namespaces (kernel.unprivileged_userns_clone=1)")
    return _MODE


def kill_group(pid: int) -> None:
    """SIGKILL a process group led by pid (the launcher and bubblewrap of one run)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
