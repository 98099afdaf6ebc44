"""Start the student's IPython kernel inside the sandbox (used as the grader's kernelspec argv).

    python -m course_kit.grading.kernel_launcher --work DIR [--uid U --gid G] [--memory BYTES] -f CONN

As root it copies the connection file into the work folder, sets resource limits, drops to the
unprivileged uid/gid (no supplementary groups) and execs ipykernel there, so student code can write
only its scratch copy (plus world-writable places such as /tmp). Without root it uses bubblewrap
when available (read-only root, writable work folder), else runs with the limits only.
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys

from course_kit.grading import sandbox


def _limits(memory: int, nproc: int, fsize: int) -> None:
    if memory > 0:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    if fsize > 0:
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    if nproc > 0 and os.geteuid() == 0:  # per-uid: meaningful once we are the sandbox uid
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


KEEP_ENV = ("PATH", "LANG", "LC_", "TZ", "TERM", "VIRTUAL_ENV", "PYTHON", "COURSE_KIT_", "OMP_", "MKL_",
            "OPENBLAS_", "MALLOC_", "TRITON_", "CUDA_", "TORCH", "NVIDIA_", "LD_LIBRARY_PATH")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--work", required=True)
    parser.add_argument("--uid", type=int, default=-1)
    parser.add_argument("--gid", type=int, default=-1)
    parser.add_argument("--memory", type=int, default=0, help="address-space limit in bytes (0: none)")
    parser.add_argument("--nproc", type=int, default=512)
    parser.add_argument("--fsize", type=int, default=2 << 30)
    parser.add_argument("--pidfile", default="")
    parser.add_argument("-f", dest="connection_file", required=True)
    args = parser.parse_args(argv)

    if args.pidfile:  # the grader kills this process group after the run (the kernel has its own session)
        with open(args.pidfile, "w") as f:
            f.write(str(os.getpid()))
    work = os.path.abspath(args.work)
    conn = os.path.join(work, ".kernel-connection.json")
    shutil.copyfile(args.connection_file, conn)
    # Only what a kernel needs: the grader's other variables (tokens, credentials) stay out of reach.
    env = {k: v for k, v in os.environ.items() if k.startswith(KEEP_ENV) and k != "COURSE_KIT_GRADE_RESULTS"}
    for key in ("HOME", "IPYTHONDIR", "MPLCONFIGDIR", "JUPYTER_RUNTIME_DIR", "JUPYTER_DATA_DIR"):
        env[key] = work if key == "HOME" else os.path.join(work, "." + key.lower())
    env["TMPDIR"] = os.path.join(work, ".tmp")
    os.makedirs(env["TMPDIR"], exist_ok=True)
    kernel = [sys.executable, "-m", "ipykernel_launcher", "-f", conn, "--HistoryManager.enabled=False"]
    os.chdir(work)
    _limits(args.memory, args.nproc, args.fsize)

    if os.geteuid() == 0 and args.uid >= 0:
        env["USER"] = env["LOGNAME"] = f"sandbox{args.uid}"
        for root, dirs, files in os.walk(work):
            for name in dirs + files:
                os.lchown(os.path.join(root, name), args.uid, args.gid)
        os.chown(work, args.uid, args.gid)
        if sandbox.drop_method() == "setpriv":
            # The interpreter or the course lives where other users can't read (a pyenv under /root):
            # keep only the capability to read and search, never to write (util-linux setpriv).
            kernel = [shutil.which("setpriv"), f"--reuid={args.uid}", f"--regid={args.gid}", "--clear-groups",
                      "--inh-caps=-all,+dac_read_search", "--ambient-caps=+dac_read_search", "--"] + kernel
        else:
            os.setgroups([])
            os.setgid(args.gid)
            os.setuid(args.uid)
    elif shutil.which("bwrap"):
        kernel = [shutil.which("bwrap"), "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                  "--tmpfs", "/tmp", "--bind", work, work, "--die-with-parent", "--chdir", work] + kernel
    os.execve(kernel[0], kernel, env)


if __name__ == "__main__":
    main()
