"""`make lab` serves JupyterLab on the given port and token, and its contents API lists the notebooks."""
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


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_lab_serves_the_notebooks():
    venv = Path(os.environ.get("VIRTUAL_ENV", ROOT / ".venv"))
    if not (venv / "bin" / "jupyter").exists():
        pytest.skip("JupyterLab is not installed in the project environment")
    port = _free_port()
    env = {**os.environ, "PORT": str(port), "JUPYTER_TOKEN": "t", "VENV": str(venv)}
    env.pop("DISPLAY", None)
    proc = subprocess.Popen(["make", "-s", "lab"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + 120
        listing = None
        while time.time() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/contents/notebooks?token=t", timeout=5) as r:
                    listing = json.load(r)
                break
            except OSError:
                time.sleep(1)
        assert listing is not None, proc.stdout.read().decode() if proc.poll() is not None else "no answer"
        names = {item["name"] for item in listing["content"]}
        assert "00_start_here.ipynb" in names
        with pytest.raises(urllib.error.HTTPError):     # the token is required
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/contents/notebooks", timeout=5)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
