"""The course-kit command: doctor runs, bad input is one line on stderr and exit status 2."""
import json
import subprocess
import sys

from course_kit import cli


def run(*args, env=None):
    return subprocess.run([sys.executable, "-m", "course_kit", *args], capture_output=True, text=True,
                          timeout=300, env=env)


def test_doctor_runs():
    out = run("doctor")
    assert out.returncode == 0, out.stderr
    assert "torch" in out.stdout and "What the course can do here" in out.stdout


def test_unknown_topic_is_one_line_and_exit_2(capsys):
    assert cli.main(["bench", "no_such_topic"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "unknown topic 'no_such_topic'" in err and "roofline" in err


def test_unwritable_output_folder_is_exit_2(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert cli.main(["bench", "roofline", "--out", str(blocker / "sub")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "output folder" in err


def test_bad_param_is_exit_2(capsys):
    assert cli.main(["bench", "roofline", "--param", "oops"]) == 2
    assert "NAME=VALUE" in capsys.readouterr().err


def test_bench_writes_a_stamped_record(tmp_path):
    out = run("bench", "roofline", "--out", str(tmp_path), "--param", "copy_mib=2", "--param", "matmul_n=32",
              "--param", "repeat=2")
    assert out.returncode == 0, out.stderr
    record = json.loads((tmp_path / "roofline.json").read_text())
    assert record["topic"] == "roofline" and record["params"]["matmul_n"] == 32
    assert record["environment"]["torch"] and record["summary"]["copy_gbs"] > 0


def test_record_rejects_unknown_notebook(capsys, tmp_path):
    assert cli.main(["record", "99", "--out", str(tmp_path)]) == 2


def test_record_accepts_only_the_exercise_stubs_errors(tmp_path):
    """An executed learner build: its stubs raise in cells tagged raises-exception; any other error is a failure."""
    import json
    from course_kit.cli import unexpected_errors
    err = {"output_type": "error", "ename": "NotImplementedError", "evalue": "Exercise 00.x", "traceback": []}
    cells = [{"cell_type": "code", "metadata": {"tags": ["raises-exception"]}, "outputs": [err]},
             {"cell_type": "code", "metadata": {}, "outputs": [{"output_type": "stream", "text": "ok"}]}]
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps({"cells": cells}))
    assert unexpected_errors(path) == []
    cells.append({"cell_type": "code", "metadata": {}, "outputs": [dict(err, ename="RuntimeError")]})
    path.write_text(json.dumps({"cells": cells}))
    assert unexpected_errors(path) == [2]
