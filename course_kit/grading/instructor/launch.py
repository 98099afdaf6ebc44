"""First step of every sandboxed run when grading as root: `python -I -S launch.py SPEC.json`.

Standard library only, so it starts in milliseconds and imports nothing from the course. As root it:
1. joins the run's cgroups (memory and process caps for the whole tree of the run);
2. sets per-process limits (address space where no memory cgroup exists, processes, file size, no
   core files);
3. in a private mount namespace, bind-mounts each folder the sandbox needs onto an empty folder
   any user can reach (the Python install may sit under /root, which only root may traverse);
4. drops to the run's own unprivileged uid and gid, with no supplementary groups;
5. execs bubblewrap, which builds the sandbox from those folders (its arguments passed through a
   memfd, so the sandbox's /proc/1/cmdline shows none of them).
"""
from __future__ import annotations

import ctypes
import json
import os
import resource
import sys

CLONE_NEWNS = 0x00020000
MS_RDONLY, MS_BIND, MS_REC, MS_PRIVATE, MS_REMOUNT = 0x1, 0x1000, 0x4000, 0x40000, 0x20


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def stage_mounts(pairs: list[list[str]]) -> None:
    """Private mount namespace; bind each source folder read-only onto its staging folder."""
    libc = _libc()
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
    _check(libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "make mounts private")
    for source, target in pairs:
        _check(libc.mount(source.encode(), target.encode(), None, MS_BIND | MS_REC, None), f"bind {source}")
        _check(libc.mount(None, target.encode(), None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_REC, None),
               f"read-only {target}")


def main(spec_path: str) -> None:
    with open(spec_path) as f:
        spec = json.load(f)
    for procs in spec.get("cgroup_procs", []):
        with open(procs, "w") as f:
            f.write(str(os.getpid()))
    limits = spec.get("rlimits", {})
    for name, value in limits.items():
        resource.setrlimit(getattr(resource, name), (value, value))
    if spec.get("stage"):
        stage_mounts(spec["stage"])
    uid = spec.get("uid")
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
        if os.getuid() != uid or os.geteuid() != uid:
            raise SystemExit("launch: could not drop to the sandbox uid")
    argv = spec["argv"]
    # bubblewrap reads its arguments from a memfd: as pid 1 of the sandbox, its command line is
    # readable there, and it would show every host path it binds
    options = argv.index("--")              # only options go through --args; the command follows
    fd = os.memfd_create("bwrap-args", 0)
    os.write(fd, b"\0".join(a.encode() for a in argv[1:options]) + b"\0")
    os.lseek(fd, 0, os.SEEK_SET)
    os.execve(argv[0], [argv[0], "--args", str(fd)] + argv[options:], spec["env"])


if __name__ == "__main__":
    main(sys.argv[1])
