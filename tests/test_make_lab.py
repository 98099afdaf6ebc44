"""`make lab` serves JupyterLab on the given port and token, on a git-ignored working copy of the
notebooks (work/), and keeps Jupyter's own token when JUPYTER_TOKEN is not set."""
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(env_overrides: dict, drop=()) -> tuple[subprocess.Popen, dict]:
    venv = Path(os.environ.get("VIRTUAL_ENV", ROOT / ".venv"))
    if not (venv / "bin" / "jupyter").exists():
        pytest.skip("JupyterLab is not installed in the project environment")
    env = {**os.environ, "VENV": str(venv), **env_overrides}
    for key in ("DISPLAY", *drop):
        env.pop(key, None)
    # -o: serve with the environment as it is; never reinstall into it (it may be another checkout's)
    proc = subprocess.Popen(["make", "-s", "lab", "-o", f"{venv}/.lab", "-o", f"{venv}/.torch"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    return proc, env


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


def _get(url: str):
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.load(r)


def _wait_for(port: int, proc: subprocess.Popen, query: str = ""):
    deadline = time.time() + 180
    while time.time() < deadline and proc.poll() is None:
        try:
            return _get(f"http://127.0.0.1:{port}/api/status{query}")
        except urllib.error.HTTPError:
            return "up"          # up, and refusing us: authentication is on
        except OSError:
            time.sleep(1)
    raise AssertionError(proc.stdout.read().decode() if proc.poll() is not None else "no answer")


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_lab_serves_a_working_copy_of_the_notebooks():
    port = _free_port()
    before = {p.name: p.read_bytes() for p in (ROOT / "notebooks").glob("*.ipynb")}
    proc, _ = _start({"PORT": str(port), "JUPYTER_TOKEN": "t"})
    try:
        _wait_for(port, proc, "?token=t")
        listing = _get(f"http://127.0.0.1:{port}/api/contents/work?token=t")
        names = {item["name"] for item in listing["content"]}
        assert set(before) <= names, "work/ lacks notebooks"
        # a learner's save goes to work/, never to the tracked notebooks/
        nb = _get(f"http://127.0.0.1:{port}/api/contents/work/00_start_here.ipynb?token=t")
        nb["content"]["cells"][0]["source"] = "# edited by the learner"
        body = json.dumps({"type": "notebook", "format": "json", "content": nb["content"]}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/api/contents/work/00_start_here.ipynb?token=t",
                                     data=body, method="PUT", headers={"Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=10).close()
        assert {p.name: p.read_bytes() for p in (ROOT / "notebooks").glob("*.ipynb")} == before
        with pytest.raises(urllib.error.HTTPError):     # the token is required
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/contents/work", timeout=5)
    finally:
        _stop(proc)
    # a second `make lab` never overwrites the learner's copy
    proc, _ = _start({"PORT": str(port), "JUPYTER_TOKEN": "t"})
    try:
        _wait_for(port, proc, "?token=t")
        assert "edited by the learner" in (ROOT / "work" / "00_start_here.ipynb").read_text()
    finally:
        _stop(proc)
        (ROOT / "work" / "00_start_here.ipynb").write_bytes(before["00_start_here.ipynb"])


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_without_jupyter_token_jupyter_makes_its_own():
    port = _free_port()
    proc, _ = _start({"PORT": str(port)}, drop=("JUPYTER_TOKEN",))
    try:
        _wait_for(port, proc)
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/contents/work", timeout=5)
        assert refused.value.code == 403, "an empty token would turn authentication off"
    finally:
        _stop(proc)
