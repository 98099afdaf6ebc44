"""The grader's caps (issue 43): the checkers' decoder enforces its caps before it allocates and never
copies a repeated reference; a checker process stopped by its caps still gives every other answer its
verdict; grade checks its free disk first and a gradebook it cannot write never stops it; ids, links
and sizes in submissions. Through the sandbox: tests/test_hostile.py."""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest

from course_kit.grading.checks import codec, judge, registry
from course_kit.grading.instructor import assemble, cells, disk, grade, runner, sandbox, submissions
from course_kit.grading.instructor.context import new_job
from course_kit.grading.instructor.judging import judge as run_judge


def _forge(folder: Path, tree, arrays=()) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i, a in enumerate(arrays):
        np.save(folder / f"a{i}.npy", a, allow_pickle=False)
    (folder / "answer.json").write_text(json.dumps({"tree": tree, "arrays": len(arrays)}))
    return folder


def test_a_repeated_reference_is_decoded_once_and_shared(tmp_path):
    big = np.ones(1 << 20, np.float32)
    back = codec.read(_forge(tmp_path / "a", {"x": [{"$ndarray": 0}] * 1000,
                                             "t": [{"$tensor": 1, "dtype": "torch.float32", "shape": [1 << 20]}] * 3},
                             [big, big]))
    assert all(x is back["x"][0] for x in back["x"]) and all(t is back["t"][0] for t in back["t"])
    assert not back["x"][0].flags.owndata          # a view of the bytes read, not a copy of them
    with pytest.raises(codec.AnswerError, match="referenced twice with different types"):
        codec.read(_forge(tmp_path / "b", [{"$ndarray": 0}, {"$tensor": 0, "dtype": "torch.float32", "shape": [4]}],
                          [np.ones(4, np.float32)]))


def test_caps_are_checked_on_the_declared_size_before_reading(tmp_path):
    head = np.lib.format.header_data_from_array_1_0(np.zeros(1))
    head["shape"] = (10 ** 12,)                           # 8 TB declared, 8 bytes given
    folder = _forge(tmp_path / "huge", {"$ndarray": 0})
    (folder / "answer.json").write_text(json.dumps({"tree": {"$ndarray": 0}, "arrays": 1}))
    with open(folder / "a0.npy", "wb") as f:
        np.lib.format.write_array_header_1_0(f, head)
        f.write(bytes(8))
    with pytest.raises(codec.AnswerError, match="over the 16 MiB of one array"):
        codec.read(folder)
    head["shape"] = (4,)                                  # 32 bytes declared, 8 given
    with open(folder / "a0.npy", "wb") as f:
        np.lib.format.write_array_header_1_0(f, head)
        f.write(bytes(8))
    with pytest.raises(codec.AnswerError, match="holds 8 bytes of data for 32 declared"):
        codec.read(folder)
    # per answer: five arrays of 15 MiB (75 MiB) pass the per-array cap, not the answer's
    five = [np.zeros(15 << 18, np.float32)] * 5
    with pytest.raises(codec.AnswerError, match="exceed 64 MiB together"):
        codec.read(_forge(tmp_path / "five", [{"$ndarray": i} for i in range(5)], five))
    # in total: a budget shared by every answer one checker process reads
    budget = codec.Budget(20 << 20)
    codec.read(_forge(tmp_path / "one", {"$ndarray": 0}, [np.zeros(15 << 18, np.float32)]), budget)
    with pytest.raises(codec.AnswerError, match="together exceed 20 MiB of arrays"):
        codec.read(tmp_path / "one", budget)


@pytest.mark.parametrize("tree, arrays, says", [
    ({"$tensor": 0, "dtype": "torch.float32", "shape": [2]}, [np.array(["a", "b"])], "must be plain numbers"),
    ({"$tensor": 0, "dtype": "torch.bfloat16", "shape": [1]}, [np.zeros(3, np.uint8)], "cannot be a torch.bfloat16"),
    ({"$tensor": 0, "dtype": "torch.float32", "shape": [2]}, [np.zeros(2, ">f4")], "must be plain numbers"),
    ({"$bigint": "12x"}, [], "malformed big integer"),
    ({"$bigint": "9" * 5000}, [], "malformed big integer"),
    ({"$tensor": 0, "dtype": "torch.float32", "shape": [True]}, [np.zeros(1, np.float32)], "malformed tensor shape"),
])
def test_every_decoder_failure_is_an_answer_error(tmp_path, tree, arrays, says):
    with pytest.raises(codec.AnswerError, match=says):
        codec.read(_forge(tmp_path / "a", tree, arrays))


def test_the_judge_gives_each_answer_its_own_verdict(tmp_path):
    """An answer that breaks the decoder, the checker or the registry is that answer's error row only."""
    answers = tmp_path / "answers"
    codec.write(answers / "99.square", {"values": [[0, 1, 4, 9, 16]]})
    _forge(answers / "99.add", {"results": [{"$tensor": 0, "dtype": "torch.float32", "shape": [2]}, 0, 42]},
           [np.array(["a", "b"])])
    codec.write(answers / "99.square_hidden", {"values": [[0, 1, 4, 9, 16]]})
    checks = [{"id": "99.add"}, {"id": "99.nope"}, {"id": "99.square"}]
    out = tmp_path / "verdicts.json"
    verdicts = judge.judge({"answers": str(answers), "checks": checks}, out)["verdicts"]
    assert verdicts["99.square"]["status"] == "passed"
    assert verdicts["99.add"] == {"status": "error", "message": "the answer could not be read: a tensor's data "
                                                               "must be plain numbers, found numpy dtype <U1"}
    assert verdicts["99.nope"]["status"] == "error" and "ValueError: unknown exercise '99.nope'" in \
        verdicts["99.nope"]["message"] and "\n" not in verdicts["99.nope"]["message"]
    assert json.loads(out.read_text()) == {"verdicts": verdicts, "judging": None}


HOG_CHECKS = '''
from course_kit import grading

@grading.exercise("98.ok")
def ok(x):
    grading.expect(x == 1, "x", 1, x)

@grading.exercise("98.ok2")
def ok2(x):
    grading.expect(x == 2, "x", 2, x)

@grading.exercise("98.hog")
def hog(x):
    kept = [bytearray(64 << 20) for _ in range(1000)]    # far past the checkers' memory cap
'''


def test_a_checker_stopped_by_its_memory_cap_costs_that_answer_only(tmp_path):
    mode = sandbox.mode()
    if mode.kind == "none" or not mode.memory.startswith("cgroup"):
        pytest.skip(f"needs a sandbox with a memory cgroup: {mode.describe()}")
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    (hidden / "nb98.py").write_text(HOG_CHECKS)
    scratch = Path(tempfile.mkdtemp(prefix="course-kit-grade-"))   # where grade puts it: reachable by the run's uid
    job = new_job(scratch)
    for name, value in (("98.ok", 1), ("98.hog", 0), ("98.ok2", 2)):
        codec.write(job / "answers" / name, {"values": [value]})
    ctx = runner.Context(mode, tmp_path, None, hidden, sandbox.Limits(memory_bytes=400 << 20), log=lambda _: None)
    plan = assemble.Plan(checks={"98.x": ["98.ok", "98.hog", "98.ok2"]})
    try:
        verdicts = run_judge(plan, ctx, job, ctx.next_uid())
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    assert verdicts["98.ok"]["status"] == verdicts["98.ok2"]["status"] == "passed", verdicts
    assert verdicts["98.hog"] == {"status": "error", "message": "the checker was stopped by its memory or time "
                                                               "cap while it judged this answer"}


def test_grade_refuses_to_start_without_free_disk(tmp_path, monkeypatch):
    real = disk.shutil.disk_usage
    monkeypatch.setattr(disk.shutil, "disk_usage", lambda p: real(p)._replace(free=10 << 20))
    with pytest.raises(ValueError, match=r"only 10 MiB free on the disk of .*; grading needs at least \d+ MiB"):
        disk.check_free({tmp_path: 64 << 20})
    disk.check_free({tmp_path: 5 << 20, tmp_path / "sub": 4 << 20})     # one file system: 9 MiB of 10


def test_a_gradebook_that_cannot_be_written_never_stops_grading(tmp_path, monkeypatch):
    rows = [grade.Row("s", "99_selftest.ipynb", "99.add", 2, 2, "passed", "ok")]
    calls, log = [], []

    def flaky(path, rows_):
        calls.append(path)
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(grade, "write_csv", flaky)
    assert grade.save_csv(tmp_path / "g.csv", rows, log.append) is False
    assert "could not be written (No space left on device); grading goes on" in log[0]
    course = {"99_selftest.ipynb": [cells.Exercise("99.add", 2)]}
    assert grade._finish(rows, course, tmp_path / "g.csv", log.append) == rows   # no exception
    assert any("could not be written anywhere" in line for line in log)
    assert any(line.startswith("s,99_selftest.ipynb,99.add,2,passed") for line in log)


def test_ids_with_a_trailing_newline_are_refused():
    for pattern in (cells.ID, registry.ID):
        assert pattern.match("01.bf16_round") and not pattern.match("01.bf16_round\n")
    with pytest.raises(ValueError, match="must look like 'NN.name'"):
        registry.exercise("01.x\n")
    nb = {"nbformat": 4, "cells": [{"cell_type": "code", "source": "x = 1", "metadata": {
        "course_kit": {"exercise": "01.x\n", "role": "solution"}}}]}
    with pytest.raises(submissions.Malformed, match="is not 'NN.name'"):
        submissions.parse(json.dumps(nb).encode(), "01_x.ipynb")


def test_hard_links_are_refused_like_symbolic_links_and_sizes_are_in_mib(tmp_path):
    real = tmp_path / "peer.ipynb"
    real.write_text("{}")
    (tmp_path / "a").mkdir()
    os.link(real, tmp_path / "a" / "01_x.ipynb")
    os.symlink(real, tmp_path / "a" / "02_x.ipynb")
    reasons = []
    for name in ("01_x.ipynb", "02_x.ipynb"):
        with pytest.raises(submissions.Malformed) as info:
            submissions.read_bytes(tmp_path / "a" / name)
        reasons.append(str(info.value).replace(name, "NAME"))
    assert reasons[0] == reasons[1] == "NAME is a link (symbolic or hard); only files that are not links are graded"
    big = tmp_path / "big.ipynb"
    big.write_bytes(b" " * (3 << 20))
    with pytest.raises(submissions.Malformed, match=r"^big.ipynb is over the size cap \(3.0 of at most 2 MiB\)$"):
        submissions.read_bytes(big, 2 << 20)


def test_limits_name_the_bad_value_and_the_range():
    with pytest.raises(ValueError, match="cpus must be 0 .no CPU cap. or between 0.01 and 1024, got 2000"):
        sandbox.Limits(cpus=2000)
    with pytest.raises(ValueError, match="disk_bytes must be at least 1 MiB, got 10"):
        sandbox.Limits(disk_bytes=10)


def test_the_judge_never_passes_a_keyed_answer_without_the_instructors_key(tmp_path):
    """Graded without the answer keys (no --hidden), a measured value cannot be judged: an error row
    naming what is missing, never a pass on form alone."""
    import subprocess
    import sys
    answers = tmp_path / "answers"
    codec.write(answers / "06.first_preempt", {"values": [1, 19, 3]})
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"answers": str(answers), "checks": [{"id": "06.first_preempt"}]}))
    hidden = Path(__file__).resolve().parents[1] / "instructor" / "hidden_checks"
    out = {}
    for name, extra in (("none", []), ("hidden", ["--hidden", str(hidden)])):
        subprocess.run([sys.executable, "-m", "course_kit.grading.checks.judge", "verdict", "--job", str(job),
                        "--out", str(tmp_path / f"{name}.json"), *extra], check=True, cwd=tmp_path)
        out[name] = json.loads((tmp_path / f"{name}.json").read_text())["verdicts"]["06.first_preempt"]
    assert out["none"] == {"status": "error", "message": "not graded: the instructor's answer key of "
                                                         "06.first_preempt is missing (course-kit grade --hidden DIR)"}
    assert out["hidden"]["status"] == "passed"


def test_grade_checks_its_disk_before_any_run(tmp_path, monkeypatch):
    from grading_fixtures import write_course
    source = write_course(tmp_path)
    (tmp_path / "subs" / "ann").mkdir(parents=True)
    real = disk.shutil.disk_usage
    monkeypatch.setattr(disk.shutil, "disk_usage", lambda p: real(p)._replace(free=10 << 20))
    with pytest.raises(ValueError, match=r"only 10 MiB free on the disk of"):
        grade.grade(tmp_path / "subs", tmp_path / "out" / "gb.csv", source, log=lambda _: None)


def test_where_there_is_no_cpu_cgroup_the_log_says_so():
    mode = sandbox.Mode("bwrap-uid", "cgroup v1", "", "none (no cpu cgroup controller the grader may use)", "watched")
    text = mode.describe()
    assert "CPU cap: none (no cpu cgroup controller the grader may use): a run may slow the others" in text
    assert "watched (no tmpfs can be mounted here: a run past the cap is stopped)" in text


def test_where_no_tmpfs_can_be_mounted_a_folder_past_its_cap_is_stopped(tmp_path):
    import threading
    stopped = threading.Event()
    watch = disk.Watch(tmp_path, 1 << 20, stopped.set, every=0.02)
    (tmp_path / "small").write_bytes(bytes(1000))
    assert not stopped.wait(0.2) and not watch.struck
    (tmp_path / "big").write_bytes(b"x" * (2 << 20))
    assert stopped.wait(5) and watch.struck
    watch.stop()
