"""The README's grading-speed figure: 30 students x notebooks 00 and 04, `--workers 2`.

Two thirds of the students hand in the instructor's solutions, one third the raw release. Prints
the wall time, the CPU time of the grader and every sandbox it started (as root: a cpuacct cgroup
the grader joins, which the sandboxes' own memory, pids and cpu cgroups leave alone; a sandboxed
process that is killed never reaches getrusage) and the load average: on a machine other work also
loads, CPU seconds / 2 is what the wall time would be on an idle 2-core one.

    .venv/bin/python scripts/grade_speed.py [WORKDIR]
"""
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat

from course_kit.grading.instructor import release

ROOT = Path(__file__).resolve().parents[1]
work = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/course-kit-grade-speed")
shutil.rmtree(work, ignore_errors=True)
work.mkdir(parents=True)
subprocess.run([sys.executable, "-m", "course_kit.nbbuild", "00", "04", "--solved", str(work / "solved")],
               check=True, cwd=ROOT)
release.release(work / "solved", work / "release")
for i in range(30):
    folder = work / "subs" / f"student{i:02d}"
    folder.mkdir(parents=True)
    for name in ("00_start_here.ipynb", "04_graph_capture.ipynb"):
        if i % 3 == 0:
            shutil.copy(work / "release" / name, folder / name)
        else:
            solved, _ = release.release_notebook(nbformat.read(str(work / "solved" / name), as_version=4),
                                                 keep_solutions=True)
            nbformat.write(solved, str(folder / name))
acct = Path("/sys/fs/cgroup/cpuacct") / f"course-kit-grade-speed-{os.getpid()}"
try:
    acct.mkdir()
except OSError:
    acct = None


def join_acct():
    if acct is not None:
        (acct / "cgroup.procs").write_text(str(os.getpid()))


load_before = open("/proc/loadavg").read().split()[:3]
start = time.time()
done = subprocess.run([sys.executable, "-m", "course_kit.cli", "grade", str(work / "subs"), "--out",
                       str(work / "gradebook.csv"), "--workers", "2", "--source", str(work / "solved")],
                      capture_output=True, text=True, preexec_fn=join_acct)
elapsed = time.time() - start
print(done.stdout[-1500:], done.stderr[-500:])
if acct is not None:
    cpu = int((acct / "cpuacct.usage").read_text()) / 1e9
    acct.rmdir()
else:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = usage.ru_utime + usage.ru_stime
print(f"wall {elapsed:.0f} s; CPU of the grader and its sandboxes {cpu:.0f} s ({cpu / 2:.0f} s on 2 idle cores); "
      f"load average before {load_before}, after {open('/proc/loadavg').read().split()[:3]}")
