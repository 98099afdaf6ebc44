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
DISK_MB = 64
# cell_timeout: the honest cells take under a second; the signal-ignoring loop waits it out in full
LIMITS = sandbox.Limits(cell_timeout=10, total_timeout=150, memory_bytes=2 << 30, disk_bytes=DISK_MB << 20)
SECRET_TEXT = "TOP-SECRET-do-not-echo"

# A student who controls their kernel can write any answer files: here `check(id, ...)` writes a forged
# answer folder for the exercises in FORGED (id -> the body that writes it into `d`) instead of the
# recorded one, and records the others honestly.
FORGE = (
    "import json, os, pathlib\nimport numpy as np\nimport course_kit.grading as g\n_record = g._record\n"
    "def _forge(exercise_id, values, folder):\n"
    "    if exercise_id not in FORGED:\n        return _record(exercise_id, values, folder)\n"
    "    d = pathlib.Path(folder) / 'answers' / exercise_id\n    d.mkdir(parents=True, exist_ok=True)\n"
    "    FORGED[exercise_id](d)\n"
    "def answer(d, tree, n=0):\n"
    "    (d / 'answer.json').write_text(json.dumps({'tree': tree, 'arrays': n}))\n"
    "g._record = _forge\n")
FORGERIES = {   # each makes the checkers' decoder raise another exception type
    "type_error": ("def type_error(d):\n    np.save(d / 'a0.npy', np.array(['a', 'b']))\n"     # text as a tensor
                   "    answer(d, {'results': [{'$tensor': 0, 'dtype': 'torch.float32', 'shape': [2]}, 0, 42]}, 1)\n"),
    "runtime_error": ("def runtime_error(d):\n    np.save(d / 'a0.npy', np.zeros(3, np.uint8))\n"   # 3 bytes as bf16
                      "    answer(d, {'values': [{'$tensor': 0, 'dtype': 'torch.bfloat16', 'shape': [1]}]}, 1)\n"),
    "value_error": "def value_error(d):\n    answer(d, {'results': [{'$bigint': '12x'}, 0, 42]})\n",
    "recursion": ("def recursion(d):\n    (d / 'answer.json').write_text('{\"tree\": ' + '[' * 100000 + "
                  "']' * 100000 + ', \"arrays\": 0}')\n"),
    "huge_header": ("def huge_header(d):\n    head = np.lib.format.header_data_from_array_1_0(np.zeros(1))\n"
                    "    head['shape'] = (10 ** 12,)\n    with open(d / 'a0.npy', 'wb') as f:\n"   # 8 TB declared
                    "        np.lib.format.write_array_header_1_0(f, head)\n        f.write(bytes(8))\n"
                    "    answer(d, {'results': [{'$ndarray': 0}, 0, 42]}, 1)\n"),
    # the right squares, and one 15 MiB array referenced 1,000 times: decoded once and shared, never
    # copied (a copy per reference would be 15 GiB, far past the checkers' 2 GiB cap)
    "repeated_refs": ("def repeated_refs(d):\n    np.save(d / 'a0.npy', np.ones(15 << 18, np.float32))\n"
                      "    answer(d, {'values': [[0, 1, 4, 9, 16]], 'junk': [{'$ndarray': 0}] * 1000}, 1)\n"),
}
# student: (forgery of 99.add, forgery of 99.square); 99.half is answered honestly
FORGERS = {"forge_a": ("type_error", "runtime_error"), "forge_b": ("value_error", "recursion"),
           "forge_c": ("huge_header", "repeated_refs")}


def _forger(add: str, square: str) -> str:
    return (FORGE + FORGERIES[add] + FORGERIES[square] +
            f"FORGED = {{'99.add': {add}, '99.square': {square}}}\n" + SOLUTIONS["99.add"])


# writes 1 MiB at a time into its answers folder and /tmp until the disk cap stops it (at most 4x the
# cap, should there be none), then frees the space: it earns 99.add only where both caps held
QUOTA_WRITER = (
    "import os\nwritten = {}\n"
    "for folder in [os.environ['COURSE_KIT_GRADE'] + '/answers', '/tmp']:\n"
    "    n = 0\n    try:\n        while n < 4 * %d:\n"
    "            with open(f'{folder}/junk{n}', 'wb') as f:\n                f.write(bytes(1 << 20))\n"
    "            n += 1\n    except OSError:\n        pass\n"
    "    written[folder] = n\n    for i in range(n + 1):\n"
    "        try:\n            os.remove(f'{folder}/junk{i}')\n        except OSError:\n            pass\n"
    "def add(a, b):\n    return a + b if max(written.values()) <= %d else 0") % (DISK_MB, DISK_MB)
# every command line and environment in the sandbox: none may show the grader's scratch paths
PROC_READER = (
    "import glob\nseen = ''\nfor p in glob.glob('/proc/[0-9]*/cmdline') + glob.glob('/proc/[0-9]*/environ'):\n"
    "    try:\n        seen += open(p, 'rb').read().decode('utf-8', 'replace')\n    except OSError:\n        pass\n"
    "squares = [i * i for i in range(5)] if 'course-kit-grade' not in seen and '/job-' not in seen else [0]")


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
    # symlinks: to a peer's notebook and to a root-only file; a hard link to a peer's notebook
    for name, target in (("link_peer", peer), ("link_secret", secret)):
        (subs / name).mkdir(parents=True)
        os.symlink(target, subs / name / NAME)
    # a hard link to a full-marks notebook of a peer from elsewhere (not graded in this run: a file with
    # two names is refused under both, since which name came first cannot be told)
    elsewhere = submit(root / "elsewhere", "peer", fill(student_nb, HONEST))
    (subs / "hardlink").mkdir(parents=True)
    os.link(elsewhere, subs / "hardlink" / NAME)
    # forged answer files, each raising another exception in the checkers' decoder; a quota filler and
    # a reader of every command line (full marks only where the caps and the sandbox held)
    for name, (forged_add, forged_square) in FORGERS.items():
        add(name, {**HONEST, "99.add": _forger(forged_add, forged_square)})
    add("quota_proc", {**HONEST, "99.add": QUOTA_WRITER, "99.square": PROC_READER})
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
    # named to be graded first (submissions go in name order): its wait then overlaps the others'
    add("aaa_sigint_loop", {**HONEST, "99.add": (
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
    "aaa_sigint_loop": 0, "fork_hog": FULL - 1, "network": FULL - 2, "leaver": FULL, "finder": FULL - 1,
    "exiter": 0, "oversized": 0, "hardlink": 0,
    "forge_a": FULL - 3, "forge_b": FULL - 3, "forge_c": FULL - 2, "quota_proc": FULL,
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
    link = "99_selftest.ipynb is a link (symbolic or hard); only files that are not links are graded"
    for student, says in [("link_peer", link), ("link_secret", link), ("hardlink", link),
                          ("list_id", "exercise id in its metadata"), ("bad_json", "not valid JSON"),
                          ("nbformat3", "nbformat 3"), ("oversized", "over the size cap (3.0 of at most 2 MiB)")]:
        for r in (r for r in rows if r["student"] == student):
            assert r["status"] == "error" and says in r["message"], (student, r["message"])
            assert "\n" not in r["message"] and "Traceback" not in r["message"]
    assert _row(rows, "duplicate", "99.add")["status"] == "error"
    assert "two cells" in _row(rows, "duplicate", "99.add")["message"]


def test_nothing_secret_is_echoed(graded):
    _, out, _ = graded
    text = out.read_text() + "".join(p.read_text() for p in (out.parent / "gradebook_feedback").iterdir())
    assert SECRET_TEXT not in text


def test_signal_ignoring_loop_is_a_timeout_and_os_exit_is_a_dead_kernel(graded):
    rows, _, _ = graded
    r = _row(rows, "aaa_sigint_loop", "99.add")
    assert r["status"] == "timeout" and f"cell timeout of {LIMITS.cell_timeout:g} s" in r["message"]
    assert _row(rows, "aaa_sigint_loop", "99.square")["status"] == "error"
    for ex in ("99.add", "99.square", "99.half"):
        r = _row(rows, "exiter", ex)
        assert r["status"] == "error" and "kernel died" in r["message"], r


def test_memory_cap_covers_forked_children(graded):
    if not sandbox.mode().memory.startswith("cgroup"):
        pytest.skip(f"memory cap here: {sandbox.mode().memory} (per process)")
    rows, _, _ = graded
    assert _row(rows, "fork_hog", "99.half")["points"] == "0"


def test_a_forged_answer_costs_its_own_exercise_only_with_a_one_line_reason(graded):
    rows, _, _ = graded
    says = {("forge_a", "99.add"): "a tensor's data must be plain numbers",
            ("forge_a", "99.square"): "cannot be a torch.bfloat16",
            ("forge_b", "99.add"): "malformed big integer",
            ("forge_b", "99.square"): "answer.json is not valid JSON (RecursionError)",
            ("forge_c", "99.add"): "over the 16 MiB of one array"}
    for (student, exercise), text in says.items():
        r = _row(rows, student, exercise)
        assert r["status"] == "error" and text in r["message"], (student, exercise, r["message"])
        assert "Traceback" not in r["message"] and len(r["message"]) < 400
    for student in FORGERS:
        assert _row(rows, student, "99.half")["status"] == "passed"
    assert _row(rows, "forge_c", "99.square")["status"] == "passed"      # 1,000 references, decoded once


# ---- a CPU hog next to an honest notebook ---------------------------------------------------------

HOG = ("import os, signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
       "for _ in range(32):\n    if os.fork() == 0:\n        os.setsid()\n        while True:\n            pass\n"
       "while True:\n    pass")
# about a CPU-second of work, then the honest answer: alone it takes a second or two, next to 33 busy
# processes with no CPU cap it would get 2 of their 34 shares of this 2-core machine
BUSY_HONEST = "total = sum(i * i for i in range(12_000_000))\ndef add(a, b):\n    return a + b"
CPU_LIMITS = sandbox.Limits(cell_timeout=12, total_timeout=60, memory_bytes=1 << 30, cpus=1.0)


def test_a_cpu_hog_does_not_starve_an_honest_neighbour(tmp_path):
    if not sandbox.mode().cpu.startswith("cgroup"):
        pytest.skip(f"no CPU cap here: {sandbox.mode().cpu}")
    source = write_course(tmp_path)
    release.release(source, tmp_path / "release")
    student_nb = nbformat.read(str(tmp_path / "release" / NAME), as_version=4)
    subs = tmp_path / "subs"
    submit(subs, "hog", fill(student_nb, {**SOLUTIONS, "99.add": HOG}))
    submit(subs, "honest", fill(student_nb, {**SOLUTIONS, "99.add": BUSY_HONEST}))
    rows = grade.grade(subs, tmp_path / "out" / "gradebook.csv", source, workers=2, limits=CPU_LIMITS,
                       log=lambda _: None)
    by = {(r.student, r.exercise): r for r in rows}
    assert by["honest", "99.add"].status == "passed", by["honest", "99.add"].message
    assert by["honest", "99.square"].status == "passed"
    assert by["hog", "99.add"].status == "timeout" and by["hog", "99.add"].points == 0
