"""`course-kit record`: one notebook at a time on a GPU nothing else uses (nvidia-smi faked here), the
state stamped in each executed copy, headline figures checked against the record (issue 40 item 4)."""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from course_kit import cli, nbbuild
from course_kit.profiling import quiet


def fake_smi(folder: Path, apps: str, gpus: str) -> None:
    """An `nvidia-smi` on PATH that prints these CSV lines for the two queries the check makes."""
    exe = folder / "nvidia-smi"
    exe.write_text("#!/bin/sh\ncase \"$1\" in\n"
                   f"  --query-compute-apps*) printf '%s' '{apps}' ;;\n"
                   f"  --query-gpu*) printf '%s' '{gpus}' ;;\nesac\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)


@pytest.fixture
def smi(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return lambda apps, gpus: fake_smi(bin_dir, apps, gpus)


def test_quiet_gpu_and_busy_gpu(smi):
    smi("", "0, NVIDIA H200, 0, 512\n")
    state = quiet.check()
    assert state["quiet"] and state["other_processes"] == [] and "GPU quiet" in quiet.describe(state)
    smi("4242, python, 70000\n", "0, NVIDIA H200, 97, 71000\n")
    busy = quiet.check()
    assert not busy["quiet"] and busy["other_processes"][0]["pid"] == 4242
    assert "pid 4242 (python, 70000 MiB)" in quiet.describe(busy) and "97% utilisation" in quiet.describe(busy)
    smi(f"{os.getpid()}, python, 500\n", "0, NVIDIA H200, 3, 600\n")   # our own context does not count
    assert quiet.check()["quiet"]
    smi("", "0, NVIDIA H200, 55, 600\n")                                 # no process listed, yet busy
    assert not quiet.check()["quiet"]


def test_no_nvidia_smi_is_a_quiet_cpu(monkeypatch):
    monkeypatch.setattr(quiet.shutil, "which", lambda name: None)
    state = quiet.check()
    assert state["quiet"] and not state["nvidia_smi"]


def test_a_second_record_is_refused_while_one_runs(tmp_path):
    with quiet.lock(tmp_path / "l.lock"):
        with pytest.raises(quiet.Busy, match="one at a time"):
            with quiet.lock(tmp_path / "l.lock"):
                pass


@pytest.fixture
def one_notebook(tmp_path, monkeypatch):
    """A notebook folder holding one tiny notebook, whose output states a headline figure."""
    folder = tmp_path / "notebooks"
    folder.mkdir()
    src = ("from course_kit import notebook\n"
           "h = notebook.headline('bf16 speed-up', 2.0, 3.0, 'x')\n"
           "notebook.md(f'bf16 ran **{h.text}** faster.', headlines=[h])\n")
    nb = {"cells": [{"cell_type": "code", "metadata": {}, "source": src, "outputs": [], "execution_count": None}],
          "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
          "nbformat": 4, "nbformat_minor": 5}
    (folder / "42_tiny.ipynb").write_text(json.dumps(nb))
    monkeypatch.setattr(nbbuild, "NOTEBOOKS", folder)
    monkeypatch.setattr(quiet, "LOCK", tmp_path / "record.lock")
    monkeypatch.setattr(cli, "_finish", lambda target: "finished")
    monkeypatch.setenv("PYTHONPATH", str(Path(nbbuild.PROJECT)))
    return tmp_path / "out"


def test_record_refuses_a_busy_gpu_unless_told(smi, one_notebook, capsys):
    smi("4242, python, 70000\n", "0, NVIDIA H200, 97, 71000\n")
    assert cli.main(["record", "42", "--out", str(one_notebook), "--wait", "0"]) == cli.EXIT_BUSY
    assert "refused: GPU busy: pid 4242" in capsys.readouterr().out
    assert not (one_notebook / "42_tiny.ipynb").exists()


def _fake_execute(text: str, recorded: float):
    """papermill.execute_notebook stand-in: the copy gets the output a run would have made (a kernel
    takes tens of seconds to start; what is tested here is what record does around it)."""
    def execute(src, target, **kw):
        nb = json.loads(Path(src).read_text())
        nb["cells"][0]["outputs"] = [{"output_type": "display_data", "data": {"text/markdown": text},
                                      "metadata": {"course_kit_headlines": [
                                          {"name": "bf16", "live": 2.0, "recorded": recorded, "unit": "x",
                                           "digits": 1, "text": text.split("**")[1]}]}}]
        Path(target).write_text(json.dumps(nb))
    return execute


def test_record_stamps_the_copy_and_reports_headline_problems(smi, one_notebook, monkeypatch, capsys):
    import papermill
    smi("4242, python, 70000\n", "0, NVIDIA H200, 97, 71000\n")
    monkeypatch.setattr(papermill, "execute_notebook", _fake_execute(
        "bf16 ran **2.0x in this run (the record: 3.0x, 33% lower)**.", 3.0))
    # the headline (2.0 against a record of 3.0) is named as this run's, so it is no problem
    assert cli.main(["record", "42", "--out", str(one_notebook), "--wait", "0", "--allow-busy"]) == 0
    meta = json.loads((one_notebook / "42_tiny.ipynb").read_text())["metadata"]["course_kit"]["recording"]
    assert meta["alone"] is False and meta["allowed_busy"] is True and meta["other_processes"][0]["pid"] == 4242
    assert meta["headline_problems"] == [] and "record.log" in os.listdir(one_notebook)


def test_stamp_finds_a_headline_the_text_does_not_own(tmp_path):
    md = {"output_type": "display_data", "data": {"text/markdown": "bf16 ran **2.0x** faster."},
          "metadata": {"course_kit_headlines": [{"name": "bf16", "live": 2.0, "recorded": 3.0, "unit": "x",
                                                  "digits": 1, "text": "2.0x"}]}}
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps({"cells": [{"cell_type": "code", "metadata": {}, "outputs": [md]}], "metadata": {}}))
    found = cli.stamp(path, {"quiet": True, "nvidia_smi": False}, False)
    assert len(found) == 1 and "33% off the record" in found[0]
    meta = json.loads(path.read_text())["metadata"]["course_kit"]["recording"]
    assert meta["alone"] and meta["headline_problems"] == found


def test_record_reports_a_headline_stated_as_the_gpus_own(smi, one_notebook, monkeypatch, capsys):
    import papermill
    smi("", "0, NVIDIA H200, 0, 512\n")
    monkeypatch.setattr(papermill, "execute_notebook", _fake_execute("bf16 ran **2.0x** faster.", 3.0))
    assert cli.main(["record", "42", "--out", str(one_notebook), "--wait", "0"]) == 1
    out = capsys.readouterr()
    assert "headline problem: cell 0: bf16 = 2 x is 33% off the record" in out.out and "differ from the record" in out.err
    meta = json.loads((one_notebook / "42_tiny.ipynb").read_text())["metadata"]["course_kit"]["recording"]
    assert meta["alone"] is True and len(meta["headline_problems"]) == 1


def test_record_runs_the_notebooks_in_the_order_asked(smi, one_notebook, monkeypatch):
    # a short GPU session records the copies it most needs first: "04 08 10 07 …", not sorted
    import papermill
    import shutil
    folder = nbbuild.NOTEBOOKS
    for name in ("04_a", "08_b", "10_c"):
        shutil.copy(folder / "42_tiny.ipynb", folder / f"{name}.ipynb")
    smi("", "0, NVIDIA H200, 0, 100\n")
    order = []
    monkeypatch.setattr(papermill, "execute_notebook",
                        lambda src, target, **kw: (order.append(Path(src).stem), shutil.copy(src, target)))
    assert cli.main(["record", "10", "04", "08", "10", "--out", str(one_notebook), "--wait", "0"]) == 0
    assert order == ["10_c", "04_a", "08_b"]
