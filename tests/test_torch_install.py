"""`make lab` / `make test` install torch (course_kit.torch_install): the CPU build from PyTorch's CPU
index on a machine without an NVIDIA GPU, the default index where that index cannot be reached (said
so), the CUDA build with a GPU. The index is mocked: a local HTTP server, or a closed port."""
import http.server
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from course_kit import torch_install as ti

ROOT = Path(__file__).resolve().parents[1]


def test_plan_for_each_kind_of_machine():
    cpu = ti.plan(torch_installed=False, has_nvidia_gpu=False, system="Linux", cpu_index_reachable=True, version="2.13.0")
    assert cpu.pip_args == ("torch==2.13.0+cpu", "--extra-index-url", ti.CPU_INDEX) and "CPU build" in cpu.why
    fallback = ti.plan(torch_installed=False, has_nvidia_gpu=False, system="Linux", cpu_index_reachable=False, version="2.13.0")
    assert fallback.pip_args == ("torch==2.13.0",) and "cannot be reached" in fallback.why and "default index" in fallback.why
    gpu = ti.plan(torch_installed=False, has_nvidia_gpu=True, system="Linux", cpu_index_reachable=None, version="2.13.0")
    assert gpu.pip_args == ("torch==2.13.0",) and "CUDA" in gpu.why
    mac = ti.plan(torch_installed=False, has_nvidia_gpu=False, system="Darwin", cpu_index_reachable=None)
    assert "+cpu" not in " ".join(mac.pip_args)
    kept = ti.plan(torch_installed=True, has_nvidia_gpu=False, system="Linux", cpu_index_reachable=None)
    assert kept.pip_args == ()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def fake_index(tmp_path):
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "index.html").write_text("<a href='torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl'>torch</a>")
    handler = lambda *a, **k: http.server.SimpleHTTPRequestHandler(*a, directory=str(tmp_path), **k)  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.RequestHandlerClass.log_message = lambda *a: None
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_reachability_of_a_mocked_and_an_unreachable_index(fake_index):
    assert ti.index_reachable(fake_index)
    assert not ti.index_reachable(f"http://127.0.0.1:{_closed_port()}/whl/cpu", timeout=2)


def _dry_run(index: str, tmp_path: Path) -> str:
    # an interpreter without torch, and no nvidia-smi on PATH: the CPU-machine case
    no_torch = tmp_path / "python"
    no_torch.write_text(f"#!/bin/sh\nexec {sys.executable} -I -S \"$@\"\n")
    no_torch.chmod(0o755)
    out = subprocess.run([sys.executable, "-m", "course_kit.torch_install", "--python", str(no_torch),
                          "--cpu-index", index, "--dry-run"], capture_output=True, text=True, cwd=ROOT,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_a_cpu_machine_takes_the_cpu_index_or_says_it_falls_back(fake_index, tmp_path):
    reached = _dry_run(fake_index, tmp_path)
    assert "CPU build" in reached and f"torch==2.13.0+cpu --extra-index-url {fake_index}" in reached
    fell_back = _dry_run(f"http://127.0.0.1:{_closed_port()}/whl/cpu", tmp_path)
    assert "cannot be reached" in fell_back and "would run: pip install torch==2.13.0\n" in fell_back


def test_the_makefile_installs_torch_through_it_before_the_course():
    make = (ROOT / "Makefile").read_text()
    torch_rule = make.split("$(VENV)/.torch:", 1)[1].split("\n\n", 1)[0]
    assert "course_kit.torch_install" in torch_rule and "https://download.pytorch.org/whl/cpu" in make
    for stamp in ("$(VENV)/.lab:", "$(VENV)/.test:"):
        assert "$(VENV)/.torch" in make.split(stamp, 1)[1].split("\n", 1)[0]
