"""What a graded run may write, and the grader's own disk.

Everything a run can write is size-limited: its answers folder (the one folder it writes that
outlives it, read afterwards by the checkers' process) becomes, as root, a tmpfs of `disk_bytes`
(`--disk-mb`) mounted on the host for the run and its judging, then unmounted; its private /tmp,
/var/tmp, /dev/shm and home are bubblewrap tmpfs of the same size. A tmpfs lives in memory, so the
run's memory cgroup counts it too. Where no tmpfs can be mounted (not root), the answers folder is
watched instead: a run whose folder passes the cap is stopped (`Watch`), and the log says so.

`check_free` is the grader's own check before it starts: enough free disk for its scratch and
the gradebook.
"""
from __future__ import annotations

import ctypes
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Callable

MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x2, 0x4, 0x8
MNT_DETACH = 0x2
INODES = 16384          # files an answers folder may hold (a tmpfs's default is half the RAM's pages)
MiB = 1 << 20


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
    return libc


def limit_folder(path: Path, size: int, uid: int | None) -> bool:
    """Mount a tmpfs of `size` bytes on the (empty) folder `path`, owned by `uid`; False where this
    process may not mount (not root, no CAP_SYS_ADMIN)."""
    if os.geteuid() != 0:
        return False
    owner = os.getuid() if uid is None else uid
    options = f"size={size},nr_inodes={INODES},mode=0700,uid={owner},gid={owner}".encode()
    rc = _libc().mount(b"tmpfs", str(path).encode(), b"tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, options)
    return rc == 0


def release_folder(path: Path) -> None:
    """Unmount what limit_folder mounted (lazily: nothing of the run may hold it by now)."""
    if os.path.ismount(path):
        _libc().umount2(str(path).encode(), MNT_DETACH)


def can_limit() -> bool:
    """Can this grader mount a size-limited tmpfs (probed on a scratch folder)?"""
    probe = Path(tempfile.mkdtemp(prefix="course-kit-disk-probe-"))
    try:
        ok = limit_folder(probe, MiB, None)
        release_folder(probe)
        return ok
    finally:
        shutil.rmtree(probe, ignore_errors=True)


def folder_bytes(path: Path) -> int:
    """Bytes a folder's tree occupies (allocated blocks; links are not followed)."""
    total = 0
    for root, dirs, files in os.walk(path):
        for name in files + dirs:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                pass
    return total


class Watch:
    """Where no tmpfs can be mounted: poll a folder's size and call `over()` once it passes `cap`."""

    def __init__(self, path: Path, cap: int, over: Callable[[], None], every: float = 0.2):
        self.path, self.cap, self.over, self.every = path, cap, over, every
        self.struck = False
        self._stop = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            if folder_bytes(self.path) > self.cap:
                self.struck = True
                self.over()
                return

    def stop(self) -> None:
        self._stop.set()


def check_free(needs: dict[Path, int]) -> None:
    """ValueError naming the folder, its free space and what grading needs, where a file system
    holds less free space than needed (needs: {folder: bytes}; folders on one file system add up)."""
    by_device: dict[int, tuple[Path, int]] = {}
    for folder, need in needs.items():
        folder = Path(folder)
        probe = folder if folder.exists() else next((p for p in folder.parents if p.exists()), Path("/"))
        dev = os.stat(probe).st_dev
        first, total = by_device.get(dev, (probe, 0))
        by_device[dev] = (first, total + need)
    for probe, need in by_device.values():
        free = shutil.disk_usage(probe).free
        if free < need:
            raise ValueError(f"only {free / MiB:.0f} MiB free on the disk of {probe}; grading needs at least "
                             f"{need / MiB:.0f} MiB there (free some space, or point TMPDIR or --out elsewhere)")
