"""The sandbox every graded notebook (and every checker run) gets: bubblewrap, uids, cgroups.

What a run gets (see README, "For instructors"):
- namespaces: user, mount, pid, network (an own loopback only), IPC, UTS; no capabilities,
  no_new_privs, no nested user namespaces, a new session (no terminal injection), and bubblewrap
  dies with the grader;
- as root, its own unprivileged host uid and gid per run (no supplementary groups);
- a file system of read-only binds of only /usr, the Python install, the package and the data the
  run needs, plus its own scratch folders read-write; private tmpfs /tmp, /var/tmp and /dev/shm;
- a memory cap, a process cap and a CPU cap for the run's whole tree (cgroups.py: v2, else v1, where
  writable), else per-process address-space and per-uid process limits (and no CPU cap, which the
  log says); CPU threads through the environment;
- a size cap on everything it writes (disk.py): its answers folder a size-limited tmpfs, its
  private folders bubblewrap tmpfs of the same size;
- bubblewrap's arguments (host paths) passed through a file descriptor, so its process (pid 1 in
  the sandbox) shows none of them in /proc/1/cmdline;
- a kill that reaches every process: the pid namespace dies with its first process.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from . import disk
from .cgroups import Cgroup

__all__ = ["Cgroup", "Limits", "Mode", "Run", "command", "kill_group", "mode", "popen", "python_paths",
           "session_uids", "traversable"]

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
    disk_bytes: int = 256 << 20      # everything it writes in one folder (answers, /tmp, home...)
    cpus: float = 1.0                # CPU time of the run's whole tree, in CPUs (cgroup); 0: no cap

    def __post_init__(self) -> None:
        for name in ("cell_timeout", "total_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0 seconds, got {getattr(self, name)!r}")
        if self.memory_bytes < 0:
            raise ValueError(f"memory_bytes must be >= 0 (0 means no limit), got {self.memory_bytes}")
        if self.threads < 1 or self.processes < 8:
            raise ValueError(f"threads must be >= 1 and processes >= 8, got {self.threads}, {self.processes}")
        if self.disk_bytes < 1 << 20:
            raise ValueError(f"disk_bytes must be at least 1 MiB, got {self.disk_bytes}")
        if not (self.cpus == 0 or 0.01 <= self.cpus <= 1024):
            raise ValueError(f"cpus must be 0 (no CPU cap) or between 0.01 and 1024, got {self.cpus!r}")


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
    """How to start one sandboxed command: argv for Popen, the launcher's spec (root only) and the
    file descriptors the command inherits (bubblewrap's arguments, without root)."""
    argv: list[str]
    env: dict
    spec_path: Path | None
    fds: tuple = field(default=())


def args_fd(args: list[str]) -> int:
    """bubblewrap's arguments in an inheritable memfd (NUL-separated, for `bwrap --args FD`): bubblewrap
    is pid 1 in the sandbox, and its /proc/1/cmdline would show every host path it binds."""
    fd = os.memfd_create("bwrap-args", 0)
    os.write(fd, b"\0".join(a.encode() for a in args) + b"\0")
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def popen(run: Run, **kwargs) -> subprocess.Popen:
    """Start a Run (passing its descriptors, closed here once the child holds them)."""
    try:
        return subprocess.Popen(run.argv, env=run.env or {}, pass_fds=tuple(kwargs.pop("pass_fds", ())) + run.fds,
                                **kwargs)
    finally:
        for fd in run.fds:
            os.close(fd)


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
    size = str(limits.disk_bytes)
    for tmp in ("/tmp", "/var/tmp", "/dev/shm", *tmpfs):   # in memory: counted by the memory cap too
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
        options = args.index("--")          # bubblewrap takes only options from --args, the command after
        fd = args_fd(args[1:options])
        return Run([bwrap, "--args", str(fd)] + args[options:], env, None, (fd,))
    rlimits = {"RLIMIT_NPROC": limits.processes, "RLIMIT_CORE": 0,
               "RLIMIT_FSIZE": min(limits.file_bytes, limits.disk_bytes)}
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
        fsize = min(limits.file_bytes, limits.disk_bytes)
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    return apply


# --- what this machine can do --------------------------------------------------------------------

@dataclass
class Mode:
    kind: str      # "bwrap-uid" (root: own uid per run), "bwrap" (the calling user's uid), "none"
    memory: str    # "cgroup v2" | "cgroup v1" | "rlimit (per process)"
    reason: str
    cpu: str = "none"        # "cgroup v2" | "cgroup v1" | "none (...why...)"
    disk: str = "watched"    # "tmpfs" (a size-limited tmpfs per run) | "watched" (a run past it is stopped)

    def describe(self) -> str:
        if self.kind == "none":
            return f"no sandbox: {self.reason}"
        who = "its own unprivileged uid per notebook" if self.kind == "bwrap-uid" else "the grader's own uid"
        cpu = self.cpu if self.cpu.startswith("cgroup") else f"{self.cpu}: a run may slow the others"
        written = ("a size-limited tmpfs per run" if self.disk == "tmpfs" else
                   "watched (no tmpfs can be mounted here: a run past the cap is stopped)")
        return (f"bubblewrap sandbox ({who}; no network, private /tmp and IPC, read-only Python and "
                f"package); memory cap: {self.memory}; CPU cap: {cpu}; what a run writes: {written}")


_MODE: Mode | None = None


def _probe(root: bool, group: Cgroup | None) -> tuple[bool, str]:
    """Start a trivial sandbox: (it worked, why not)."""
    import tempfile
    job = Path(tempfile.mkdtemp(prefix="course-kit-probe-"))
    os.chmod(job, 0o711)
    try:
        run = command(job, [sys.executable, "-I", "-c", "import os; print(os.getuid())"],
                      ro=[(p, p) for p in python_paths()], rw=[], env={"PATH": "/usr/bin:/bin"}, cwd="/",
                      limits=Limits(memory_bytes=2 << 30), uid=session_uids()[0] if root else None, cgroup=group)
        proc = popen(run, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = proc.communicate(timeout=60)
        ok = proc.returncode == 0 and out.strip() == str(INNER_UID)
        return ok, "" if ok else (err.strip().splitlines() or ["bubblewrap failed"])[-1][:200]
    except (OSError, subprocess.SubprocessError, RuntimeError) as exc:
        return False, f"{type(exc).__name__}: {exc}"
    finally:
        shutil.rmtree(job, ignore_errors=True)


def mode(refresh: bool = False) -> Mode:
    """Detect (once) the best sandbox this machine allows, by starting a trivial one."""
    global _MODE
    if _MODE is not None and not refresh:
        return _MODE
    if shutil.which("bwrap") is None:
        _MODE = Mode("none", "rlimit (per process)", "bubblewrap (bwrap) is not installed "
                     "(Debian/Ubuntu: apt-get install bubblewrap)")
        return _MODE
    root = os.geteuid() == 0
    group = Cgroup.create(f"course-kit-probe-{os.getpid()}", 1 << 30, 64, 1.0) if root else None
    memory = {2: "cgroup v2", 1: "cgroup v1"}[group.version] if group else "rlimit (per process)"
    cpu = (f"cgroup v{group.version}" if group and group.cpu else
           "none (not root)" if not root else "none (no cpu cgroup controller the grader may use)")
    try:
        ok, reason = _probe(root, group)
    finally:
        if group:
            group.remove()
    if ok:
        _MODE = Mode("bwrap-uid" if root else "bwrap", memory, "", cpu, "tmpfs" if disk.can_limit() else "watched")
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
