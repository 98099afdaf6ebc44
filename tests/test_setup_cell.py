"""The Colab install (course_kit.colab, called by every setup cell) against a stand-in for Colab: a
fresh virtual environment whose torch is "preinstalled" (a fake distribution), a local checkout instead
of a git clone, and no network (pip runs with --no-index and no user or site configuration)."""
import base64
import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from course_kit import colab

TORCH = "2.5.1+cu121"          # what Colab's image would hold


def _site_packages(venv: Path) -> Path:
    out = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def _fake_dist(site: Path, name: str, version: str, marker: str) -> None:
    (site / name).mkdir()
    (site / name / "__init__.py").write_text(f"__version__ = {version!r}\nMARKER = {marker!r}\n")
    info = site / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "INSTALLER").write_text("colab-image\n")
    (info / "RECORD").write_text(f"{name}/__init__.py,,\n{info.name}/METADATA,,\n{info.name}/RECORD,,\n")


def _fake_wheel(folder: Path, name: str, version: str) -> Path:
    """A newer torch on the 'index', which a resolver without the constraint would happily take."""
    path = folder / f"{name}-{version}-py3-none-any.whl"
    files = {f"{name}/__init__.py": f"__version__ = {version!r}\nMARKER = 'from-the-index'\n",
             f"{name}-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{name}-{version}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = []
    with zipfile.ZipFile(path, "w") as z:
        for arc, text in files.items():
            z.writestr(arc, text)
            digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
            record.append(f"{arc},sha256={digest},{len(text.encode())}")
        record.append(f"{name}-{version}.dist-info/RECORD,,")
        z.writestr(f"{name}-{version}.dist-info/RECORD", "\n".join(record) + "\n")
    return path


def _checkout(root: Path, torch_req: str) -> Path:
    """A checkout shaped like the course's (pyproject with a torch requirement, a package)."""
    root.mkdir()
    (root / "pyproject.toml").write_text(f'''[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "course-standin"
version = "0.1.0"
dependencies = ["{torch_req}"]

[tool.setuptools.packages.find]
include = ["course_standin*"]
''')
    (root / "course_standin").mkdir()
    (root / "course_standin" / "__init__.py").write_text("OK = True\n")
    (root / "notebooks").mkdir()
    return root


def _modern_setuptools(site: Path) -> None:
    """The venv's bundled setuptools (65) cannot build wheels without `wheel`; give it this
    environment's (>= 70, which builds them itself), copied, since the test has no index."""
    import setuptools
    import shutil
    here = Path(setuptools.__file__).parent.parent
    for old in site.glob("setuptools*"):
        shutil.rmtree(old) if old.is_dir() else old.unlink()
    for name in ("setuptools", "_distutils_hack", "distutils-precedence.pth", "pkg_resources",
                 f"setuptools-{setuptools.__version__}.dist-info"):
        src = here / name
        if src.is_dir():
            shutil.copytree(src, site / name, dirs_exist_ok=True)
        elif src.is_file():
            shutil.copy(src, site / name)


@pytest.fixture(scope="module")
def colab_env(tmp_path_factory):
    base = tmp_path_factory.mktemp("colab")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    site = _site_packages(venv)
    _modern_setuptools(site)
    _fake_dist(site, "torch", TORCH, "preinstalled")
    index = base / "index"
    index.mkdir()
    _fake_wheel(index, "torch", "2.6.0")
    return venv / "bin" / "python", site, index


@pytest.fixture
def offline_pip(monkeypatch):
    # no user/site pip configuration (this machine's find-links and constraints), no index
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_DISABLE_PIP_VERSION_CHECK", "1")


def _torch_marker(python) -> str:
    return subprocess.run([str(python), "-c", "import torch; print(torch.__version__, torch.MARKER)"],
                          capture_output=True, text=True, check=True).stdout.strip()


def test_install_keeps_colabs_torch_and_is_idempotent(colab_env, tmp_path, offline_pip):
    python, site, index = colab_env
    checkout = _checkout(tmp_path / "course-kit", "torch>=2.5")
    pip_args = ["--no-index", "--find-links", str(index), "--no-build-isolation"]
    marker = tmp_path / "marker"
    assert colab.install(checkout, python=str(python), pip_args=pip_args, marker=marker) == {}   # nothing replaced
    assert _torch_marker(python) == f"{TORCH} preinstalled"
    ok = subprocess.run([str(python), "-c", "import course_standin; print(course_standin.OK)"],
                        capture_output=True, text=True, cwd=tmp_path)
    assert ok.stdout.strip() == "True", ok.stderr

    def no_pip(*args, **kwargs):
        raise AssertionError(f"a re-run must not call pip again: {args}")
    assert colab.install(checkout, python=str(python), pip_args=pip_args, run=no_pip, marker=marker) is None
    assert _torch_marker(python) == f"{TORCH} preinstalled"


def test_a_requirement_above_colabs_torch_fails_instead_of_replacing_it(colab_env, tmp_path, offline_pip):
    """Without the constraint, pip would install torch 2.6.0 from the index over Colab's build."""
    python, site, index = colab_env
    checkout = _checkout(tmp_path / "course-kit", "torch>=2.6")
    with pytest.raises(subprocess.CalledProcessError):
        colab.install(checkout, python=str(python),
                      pip_args=["--no-index", "--find-links", str(index), "--no-build-isolation"],
                      run=lambda cmd, **kw: subprocess.run(cmd, capture_output=True, **kw), marker=tmp_path / "m")
    assert _torch_marker(python) == f"{TORCH} preinstalled"
    # the control: the same install with no constraint does replace torch, so the test can fail
    control = subprocess.run([str(python), "-m", "pip", "install", "-q", "--dry-run", "--report", "-", "-e",
                              str(checkout), "--no-index", "--find-links", str(index), "--no-build-isolation"],
                             capture_output=True, text=True)
    assert '"version": "2.6.0"' in control.stdout


def test_install_refuses_an_environment_without_torch(tmp_path):
    checkout = _checkout(tmp_path / "course-kit", "torch>=2.5")
    no_torch = tmp_path / "python"
    no_torch.write_text(f"#!/bin/sh\nexec {sys.executable} -I -S \"$@\"\n")
    no_torch.chmod(0o755)
    with pytest.raises(colab.SetupError, match="no torch"):
        colab.install(checkout, python=str(no_torch), run=lambda *a, **k: pytest.fail("pip must not run"),
                      marker=tmp_path / "m")


def test_placeholder_or_empty_repository_means_unpublished():
    for url in ("", None, colab.PLACEHOLDER_REPOSITORY, colab.PLACEHOLDER_REPOSITORY + ".git", colab.PLACEHOLDER_REPOSITORY + "/"):
        assert colab.is_placeholder(url)
    assert not colab.is_placeholder("https://github.com/someone/course")


def test_restart_only_for_what_the_kernel_already_imported_or_ipywidgets():
    replaced = {"plotly": ("5.24.1", "6.0"), "comm": ("0.1", "0.2"), "ipywidgets": ("7.7.1", "8.1.9")}
    assert colab.needs_restart(replaced, imported=["plotly.graph_objects", "os"]) == ["ipywidgets", "plotly"]
    assert colab.needs_restart({"comm": ("0.1", "0.2")}, imported=["os"]) == []
    assert colab.needs_restart({"pyyaml": ("5", "6")}, imported=["yaml"], modules_of={"pyyaml": ["yaml"]}) == ["pyyaml"]
    assert colab.changed({"a": "1", "b": "2", "c": "3"}, {"a": "1", "b": "3"}) == {"b": ("2", "3"), "c": ("3", None)}


def test_a_failed_pip_stops_in_two_lines(monkeypatch, tmp_path):
    def failing(*a, **k):
        raise subprocess.CalledProcessError(1, ["pip"])
    monkeypatch.setattr(colab, "install", failing)
    with pytest.raises(colab.SetupStop) as stop:
        colab.setup(tmp_path)
    assert len(stop.value._render_traceback_()) == 2 and "pip could not install" in stop.value.lines[0]


def test_setup_enables_colabs_widget_manager(monkeypatch, tmp_path):
    import types
    calls = []
    google = types.ModuleType("google")
    gcolab = types.ModuleType("google.colab")
    gcolab.output = types.SimpleNamespace(enable_custom_widget_manager=lambda: calls.append("on"))
    google.colab = gcolab
    monkeypatch.setitem(sys.modules, "google", google)
    monkeypatch.setitem(sys.modules, "google.colab", gcolab)
    checkout = _checkout(tmp_path / "course-kit", "torch>=2.5")
    monkeypatch.setattr(colab, "install", lambda c, **k: None)
    monkeypatch.chdir(tmp_path)
    colab.setup(checkout, "https://github.com/someone/course")
    assert calls == ["on"] and Path.cwd() == checkout / "notebooks"
