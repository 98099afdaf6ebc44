"""Hostile submissions (issue 18): one grading run of a small purpose-built course with a class of
students who try every known way to get points they have not earned, next to honest students.

Each hostile student's exact points are asserted, and the honest students keep all of theirs.
It runs through the real sandbox; it is skipped only where no sandbox can be made.
"""
from __future__ import annotations

import csv
import os
import socket
import threading
import time

import nbformat
import pytest

from course_kit.grading.instructor import grade, release, sandbox

from grading_fixtures import NAME, SOLUTIONS, fill, submit, write_course

pytestmark = pytest.mark.skipif(sandbox.mode().kind == "none", reason="no sandbox can be made here (bubblewrap)")

HALF = "import torch\ndef half(x):\n    return x * 0.5"
HONEST = {**SOLUTIONS, "99.half": HALF}
FULL = 4          # 99.add 2, 99.square 1, 99.half 1
LIMITS = sandbox.Limits(cell_timeout=20, total_timeout=150, memory_bytes=2 << 30)
SECRET_TEXT = "TOP-SECRET-do-not-echo"


def _server():
    """A localhost server that would hand out the answer to whoever reaches it."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(5)

    def serve():
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            conn.sendall(b"5")
            conn.close()
    threading.Thread(target=serve, daemon=True).start()
    return srv


def _students(root, student_nb, port):
    subs = root / "subs"
    secret = root / "secret.txt"
    secret.write_text(SECRET_TEXT)
    os.chmod(secret, 0o600)
    peer = subs / "aaa_honest" / NAME
    s = {}

    def add(name, answers, **kw):
        s[name] = submit(subs, name, fill(student_nb, answers), **kw)

    add("aaa_honest", HONEST)
    add("zzz_honest", HONEST)
    # reading other files: a peer's notebook, a root-only file, other runs' scratch (connection files)
    add("reader", {**HONEST, "99.add": (
        "import glob\nstolen = []\n"
        f"for p in [{str(peer)!r}, {str(secret)!r}] + glob.glob('/tmp/course-kit-grade-*/**', recursive=True)"
        ":\n"
        "    try:\n        stolen.append(open(p).read())\n    except Exception:\n        pass\n"
        "def add(a, b):\n    return a + b if stolen else 0")})
    # in-kernel bypasses: input transformer, pre_run_cell hook printing success, silenced tracebacks
    add("transformer", {"99.add": (
        "ip = get_ipython()\n"
        "ip.input_transformers_post.append(lambda lines: ['print(\"✅ passed\")\\n'])\n"
        "ip.events.register('pre_run_cell', lambda *a: print('✅ Exercise 99.add: passed.'))\n"
        "ip._showtraceback = lambda *a, **k: None\n"
        "def add(a, b):\n    return 0"), "99.square": "squares = [0]", "99.half": "def half(x):\n    return x"})
    # patched comparisons, the course's reference function, builtins.exec and check itself
    add("patcher", {"99.add": (
        "import math, builtins, torch, course_kit\nfrom course_kit import grading\n"
        "import course_kit.grading.checks.oracles as oracles\n"
        "math.isclose = lambda *a, **k: True\ntorch.allclose = lambda *a, **k: True\n"
        "torch.equal = lambda *a, **k: True\noracles.halve = lambda x: x\n"
        "builtins.exec = lambda *a, **k: None\n"
        "grading.check = lambda *a, **k: print('✅ passed')\n"
        "def add(a, b):\n    return 0"), "99.square": "squares = [0]", "99.half": "def half(x):\n    return x"})
    # copying: the instructor's solved notebooks and hidden checkers
    add("copier", {**HONEST, "99.add": (
        "import inspect, pathlib, glob, course_kit\nfound = []\n"
        "root = pathlib.Path(course_kit.__file__).resolve().parents[1]\n"
        "for pattern in ['notebooks/*.ipynb', 'instructor/hidden_checks/*.py', 'data/reference/**/*.ipynb']:\n"
        "    found += glob.glob(str(root / pattern), recursive=True)\n"
        "try:\n    import importlib\n    m = importlib.import_module('_course_kit_hidden_nb99')\n"
        "    found.append(inspect.getsource(m))\nexcept Exception:\n    pass\n"
        "def add(a, b):\n    return a + b if found else 0")})
    # symlinks: to a peer's notebook and to a root-only file
    for name, target in (("link_peer", peer), ("link_secret", secret)):
        (subs / name).mkdir(parents=True)
        os.symlink(target, subs / name / NAME)
    # malformed metadata: a list as exercise id; a duplicated solution cell; bad JSON; nbformat 3
    bad = fill(student_nb, HONEST)
    bad.cells[3].metadata["course_kit"]["exercise"] = ["99.add"]
    s["list_id"] = submit(subs, "list_id", bad)
    dup = fill(student_nb, HONEST)
    copy = nbformat.from_dict(dict(dup.cells[3]))
    copy.id = "duplicate-copy"
    dup.cells.append(copy)
    s["duplicate"] = submit(subs, "duplicate", dup)
    s["bad_json"] = submit(subs, "bad_json", '{"cells": [ not json')
    s["nbformat3"] = submit(subs, "nbformat3", '{"nbformat": 3, "nbformat_minor": 0, "worksheets": []}')
    # an output loop that ignores SIGINT (and SIGTERM)
    add("sigint_loop", {**HONEST, "99.add": (
        "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True:\n    print('x' * 1000)")})
    # forked memory hog: three children of 900 MB each, together over the 2 GiB cap
    add("fork_hog", {**HONEST, "99.half": (
        "import os, time\nkids = []\nfor _ in range(3):\n    pid = os.fork()\n    if pid == 0:\n"
        "        b = bytearray(900 << 20)\n        time.sleep(4)\n        os._exit(0)\n    kids.append(pid)\n"
        "ok = all(os.waitpid(p, 0)[1] == 0 for p in kids)\n"
        "def half(x):\n    return x * 0.5 if ok else x")})
    # network: localhost on the grader's machine and an outside (unroutable) address
    add("network", {**HONEST, "99.add": (
        "import socket\nreached = False\n"
        f"for host, port in [('127.0.0.1', {port}), ('10.255.255.1', 80)]:\n"
        "    try:\n        socket.create_connection((host, port), timeout=1).close()\n        reached = True\n"
        "    except OSError:\n        pass\n"
        "def add(a, b):\n    return a + b if reached else 0")})
    # leftovers: one student leaves an answer in /tmp, /dev/shm and SysV shared memory; another reads
    shm = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
           "libc.shmat.restype = ctypes.c_void_p\n")
    add("leaver", {**HONEST, "99.square": (
        "squares = [i * i for i in range(5)]\n"
        "for p in ['/tmp/ck_answer', '/dev/shm/ck_answer', '/var/tmp/ck_answer']:\n"
        "    open(p, 'w').write(repr(squares))\n" + shm +
        "seg = libc.shmget(0xC0FFEE, 4096, 0o1666)\naddr = libc.shmat(seg, None, 0)\n"
        "ctypes.memmove(addr, repr(squares).encode() + b'\\0', 20)")})
    add("finder", {**HONEST, "99.square": (
        "import ast\nsquares = [0]\n"
        "for p in ['/tmp/ck_answer', '/dev/shm/ck_answer', '/var/tmp/ck_answer']:\n"
        "    try:\n        squares = ast.literal_eval(open(p).read())\n    except Exception:\n        pass\n" + shm +
        "seg = libc.shmget(0xC0FFEE, 0, 0)\nif seg >= 0:\n"
        "    squares = ast.literal_eval(ctypes.string_at(libc.shmat(seg, None, 0)).decode())")})
    # a dead kernel
    add("exiter", {**HONEST, "99.add": "import os\nos._exit(3)"})
    # an oversized file (the cap is lowered to 2 MB for this run)
    big = fill(student_nb, HONEST)
    big.cells.append(nbformat.v4.new_markdown_cell("x" * (3 << 20)))
    s["oversized"] = submit(subs, "oversized", big)
    return subs, secret


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    source = write_course(root, with_half=True)
    release.release(source, root / "release")
    student_nb = nbformat.read(str(root / "release" / NAME), as_version=4)
    srv = _server()
    subs, secret = _students(root, student_nb, srv.getsockname()[1])
    out = root / "results" / "gradebook.csv"
    start = time.perf_counter()
    try:
        grade.grade(subs, out, source, workers=2, limits=LIMITS, max_bytes=2 << 20, log=lambda _: None)
    finally:
        srv.close()
    elapsed = time.perf_counter() - start
    with open(out, newline="") as f:
        rows = list(csv.DictReader(f))
    return rows, out, elapsed


def _points(rows, student):
    return sum(float(r["points"]) for r in rows if r["student"] == student)


def _row(rows, student, exercise):
    return next(r for r in rows if r["student"] == student and r["exercise"] == exercise)


EXPECTED = {
    "aaa_honest": FULL, "zzz_honest": FULL,
    "reader": FULL - 2, "transformer": 0, "patcher": 0, "copier": FULL - 2,
    "link_peer": 0, "link_secret": 0, "list_id": 0, "duplicate": FULL - 2, "bad_json": 0, "nbformat3": 0,
    "sigint_loop": 0, "fork_hog": FULL - 1, "network": FULL - 2, "leaver": FULL, "finder": FULL - 1,
    "exiter": 0, "oversized": 0,
}


def test_every_student_gets_exactly_the_points_earned(graded):
    rows, _, elapsed = graded
    assert {r["student"] for r in rows} == set(EXPECTED)
    got = {s: _points(rows, s) for s in EXPECTED}
    if not sandbox.mode().memory.startswith("cgroup"):   # per-process caps only: children are not summed
        got.pop("fork_hog")
    assert got == {s: p for s, p in EXPECTED.items() if s in got}, \
        [(r["student"], r["exercise"], r["status"], r["message"]) for r in rows if r["student"] in
         {s for s in got if got[s] != EXPECTED[s]}]
    print(f"graded {len(EXPECTED)} hostile and honest submissions in {elapsed:.0f} s")


def test_malformed_and_linked_files_are_error_rows_with_one_line_reasons(graded):
    rows, _, _ = graded
    for student, says in [("link_peer", "symbolic link"), ("link_secret", "symbolic link"),
                          ("list_id", "exercise id in its metadata"), ("bad_json", "not valid JSON"),
                          ("nbformat3", "nbformat 3"), ("oversized", "MB cap")]:
        for r in (r for r in rows if r["student"] == student):
            assert r["status"] == "error" and says in r["message"], (student, r["message"])
    assert _row(rows, "duplicate", "99.add")["status"] == "error"
    assert "two cells" in _row(rows, "duplicate", "99.add")["message"]


def test_nothing_secret_is_echoed(graded):
    _, out, _ = graded
    text = out.read_text() + "".join(p.read_text() for p in (out.parent / "gradebook_feedback").iterdir())
    assert SECRET_TEXT not in text


def test_signal_ignoring_loop_is_a_timeout_and_os_exit_is_a_dead_kernel(graded):
    rows, _, _ = graded
    r = _row(rows, "sigint_loop", "99.add")
    assert r["status"] == "timeout" and "cell timeout of 20 s" in r["message"]
    assert _row(rows, "sigint_loop", "99.square")["status"] == "error"
    for ex in ("99.add", "99.square", "99.half"):
        r = _row(rows, "exiter", ex)
        assert r["status"] == "error" and "kernel died" in r["message"], r


def test_memory_cap_covers_forked_children(graded):
    if not sandbox.mode().memory.startswith("cgroup"):
        pytest.skip(f"memory cap here: {sandbox.mode().memory} (per process)")
    rows, _, _ = graded
    assert _row(rows, "fork_hog", "99.half")["points"] == "0"
