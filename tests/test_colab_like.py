"""The Colab route end to end, offline: the course wheel (`make wheel`) against a machine made to look
like Colab.

1. Resolution against Colab's own versions (tests/data/colab_preinstalled.txt, fake distributions:
   metadata only): pip's report of what installing the wheel would do lists the course and the widget
   stack it needs (ipywidgets 7 -> 8) and nothing else, although the index offers newer torch,
   transformers, numpy and plotly.
2. The setup cell itself, run twice in a fresh environment with a stub `google.colab`, the wheel
   "uploaded" to its /content, pip with no index but a folder holding the widget stack: the first run
   installs, replaces only the widget stack, keeps torch and triton, and asks once for a restart in two
   lines; the second run (after the restart) installs nothing, turns on Colab's widget manager, and the
   widgets import.

The fresh environment is a venv without pip whose "preinstalled" packages are this environment's,
seen through a folder of links appended to its path (so pip treats them as outside the environment and
never removes them), except for the widget stack, which is Colab's (fake distributions, ipywidgets a
stub module).
"""
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from course_kit import colab, nbbuild

ROOT = Path(__file__).resolve().parents[1]
COLAB = dict(line.split("==") for line in (ROOT / "tests" / "data" / "colab_preinstalled.txt").read_text().splitlines()
             if line and not line.startswith("#"))
LOCAL_INDEX = Path("/opt/pypi/files")   # this machine's (and CI's) local pip index
WIDGET_STACK = ("ipywidgets-8.1.9", "widgetsnbextension-4.0.16", "jupyterlab_widgets-3.0.17", "comm-0.2.3")
FAKED = ("ipywidgets", "widgetsnbextension", "jupyterlab_widgets")


def _canon(name):
    return name.lower().replace("_", "-")


def _fake_dist(site: Path, name: str, version: str, module: str | None = None, requires=()) -> None:
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(f"Requires-Dist: {r}\n" for r in requires)
    (info / "METADATA").write_text(meta)
    (info / "INSTALLER").write_text("colab-image\n")
    record = [f"{info.name}/METADATA,,", f"{info.name}/INSTALLER,,", f"{info.name}/RECORD,,"]
    if module:
        (site / module).mkdir()
        (site / module / "__init__.py").write_text(f"__version__ = {version!r}\n")
        record.append(f"{module}/__init__.py,,")
    (info / "RECORD").write_text("\n".join(record) + "\n")


def _fake_wheel(folder: Path, name: str, version: str) -> None:
    """A newer release on the 'index' that a needless upgrade would take."""
    path = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{info}/RECORD", "")


def _venv(path: Path) -> tuple[Path, Path]:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=120)
    python = path / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    return python, site


def _offline_env(tmp: Path, find_links: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON", "VIRTUAL_ENV", "COURSE_KIT"))}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1", PIP_FIND_LINKS=str(find_links),
               PIP_DISABLE_PIP_VERSION_CHECK="1", PYTHONNOUSERSITE="1", HOME=str(tmp / "home"))
    return env


@pytest.fixture(scope="module")
def course_wheel(tmp_path_factory):
    return colab.build_wheel(tmp_path_factory.mktemp("dist"), ROOT, python=sys.executable)


@pytest.fixture(scope="module")
def index(tmp_path_factory, course_wheel):
    missing = [w for w in WIDGET_STACK if not list(LOCAL_INDEX.glob(f"{w}-*.whl"))]
    if missing:
        pytest.skip(f"the local pip index {LOCAL_INDEX} lacks {missing}")
    folder = tmp_path_factory.mktemp("index")
    for w in WIDGET_STACK:
        shutil.copy(next(LOCAL_INDEX.glob(f"{w}-*.whl")), folder)
    for name in ("torch", "triton", "transformers", "numpy", "plotly", "huggingface_hub", "tqdm"):
        _fake_wheel(folder, name, "99.0.0")
    return folder


def _report(python: Path, wheel: Path, env: dict, *extra: str) -> set[tuple[str, str]]:
    kept = {k: COLAB[k] for k in colab.KEEP}
    constraints = wheel.parent / "keep.txt"
    constraints.write_text("".join(f"{k}=={v}\n" for k, v in kept.items()))
    out = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--dry-run", "-q",
                          "--report", "-", str(wheel), "-c", str(constraints), *extra],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return {(_canon(i["metadata"]["name"]), i["metadata"]["version"]) for i in json.loads(out.stdout)["install"]}


def test_against_colabs_versions_only_the_widget_stack_changes(tmp_path, course_wheel, index):
    python, site = _venv(tmp_path / "colab")
    for name, version in COLAB.items():
        _fake_dist(site, name, version)
    env = _offline_env(tmp_path, index)
    installs = _report(python, course_wheel, env)
    assert {n for n, _ in installs} == {"course-kit", "ipywidgets", "widgetsnbextension", "jupyterlab-widgets", "comm"}
    assert ("ipywidgets", "8.1.9") in installs
    # the control: an eager upgrade takes every newer release on the index, so the test can fail
    eager = _report(python, course_wheel, env, "--upgrade", "--upgrade-strategy", "eager")
    assert {"transformers", "numpy", "plotly"} <= {n for n, v in eager if v == "99.0.0"}


def _colab_machine(tmp: Path) -> tuple[Path, Path]:
    """A venv whose preinstalled packages are this environment's (through a folder of links on its
    path) but whose widget stack is Colab's: ipywidgets 7.7.1 and its two companions."""
    python, site = _venv(tmp / "colab")
    here = Path(sysconfig.get_paths()["purelib"])
    mirror = tmp / "preinstalled"
    mirror.mkdir()
    skip = ("course_kit", "__editable__", "_course_kit") + FAKED
    for entry in here.iterdir():
        if not entry.name.lower().replace("-", "_").startswith(skip) and entry.suffix != ".pth":
            (mirror / entry.name).symlink_to(entry)
    (site / "zz_colab_preinstalled.pth").write_text(f"{mirror}\n")
    _fake_dist(site, "ipywidgets", COLAB["ipywidgets"], "ipywidgets",
               requires=["widgetsnbextension~=3.6.0", "jupyterlab-widgets>=1.0.0"])
    _fake_dist(site, "widgetsnbextension", COLAB["widgetsnbextension"])
    _fake_dist(site, "jupyterlab_widgets", COLAB["jupyterlab_widgets"])
    return python, site


DRIVER = r'''
import sys, types
calls = []
google, gcolab = types.ModuleType("google"), types.ModuleType("google.colab")
gcolab.output = types.SimpleNamespace(enable_custom_widget_manager=lambda: calls.append("widget manager"))
google.colab = gcolab
sys.modules.update({"google": google, "google.colab": gcolab})
import ipywidgets                      # Colab's kernel holds its ipywidgets from the start
try:
    exec(open(sys.argv[1]).read(), {})
except Exception as err:
    if hasattr(err, "_render_traceback_"):
        print("STOPPED:\n" + "\n".join(err._render_traceback_()))
        sys.exit(3)
    raise
import importlib, course_kit, course_kit.widgets
ipywidgets = importlib.reload(ipywidgets) if ipywidgets.__version__.startswith("7") else ipywidgets
slider = ipywidgets.IntSlider(value=3)
print("WIDGETS", ipywidgets.__version__, type(slider).__name__, calls, course_kit.__file__)
'''


def _versions(python: Path, env: dict) -> dict:
    return json.loads(subprocess.run(
        [str(python), "-c", "import importlib.metadata as m, json; print(json.dumps({d.metadata['Name'].lower().replace('_', '-'): d.version for d in m.distributions()}))"],
        capture_output=True, text=True, env=env, check=True, cwd=python.parent).stdout)


def test_the_setup_cell_installs_the_wheel_keeps_colabs_torch_and_asks_for_one_restart(tmp_path, course_wheel, index):
    python, site = _colab_machine(tmp_path)
    content = tmp_path / "content"
    content.mkdir()
    shutil.copy(course_wheel, content)                              # "uploaded" in the Files panel
    cell = tmp_path / "setup_cell.py"
    cell.write_text(nbbuild.setup_cell(colab.PLACEHOLDER_REPOSITORY).replace("/content", str(content)))
    (tmp_path / "driver.py").write_text(DRIVER)
    env = _offline_env(tmp_path, index)
    before = _versions(python, env)
    assert before["ipywidgets"] == "7.7.1" and "torch" in before and "course-kit" not in before

    first = subprocess.run([str(python), str(tmp_path / "driver.py"), str(cell)], capture_output=True, text=True,
                           env=env, cwd=tmp_path, timeout=300)
    assert first.returncode == 3, first.stdout[-3000:] + first.stderr[-3000:]
    stop = first.stdout.split("STOPPED:\n", 1)[1].strip().splitlines()
    assert len(stop) == 2 and "ipywidgets" in stop[0] and "Runtime → Restart session" in stop[1]
    assert "Traceback" not in first.stdout + first.stderr
    after = _versions(python, env)
    replaced = {n: (v, after.get(n)) for n, v in before.items() if after.get(n) != v}
    assert set(replaced) == set(FAKED_CANON), replaced                # nothing else preinstalled changed
    assert after["torch"] == before["torch"] and after.get("triton") == before.get("triton")
    assert after["ipywidgets"].startswith("8.") and after["course-kit"] == "0.1.0"

    second = subprocess.run([str(python), str(tmp_path / "driver.py"), str(cell)], capture_output=True, text=True,
                            env=env, cwd=tmp_path, timeout=300)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert "installed the course" not in second.stdout                  # the re-run installs nothing
    line = next(l for l in second.stdout.splitlines() if l.startswith("WIDGETS"))
    assert "WIDGETS 8." in line and "IntSlider" in line and "widget manager" in line
    assert str(site) in line and ".whl" not in line                     # the installed package, not the zip
    assert _versions(python, env) == after


FAKED_CANON = tuple(_canon(n) for n in FAKED)


def test_the_wheel_carries_the_records_and_traces(course_wheel):
    names = zipfile.ZipFile(course_wheel).namelist()
    assert any(n.startswith("course_kit/_data/reference/h200/") and n.endswith(".json") for n in names)
    assert any(n.startswith("course_kit/_data/traces/") for n in names)
    assert not any(n.startswith(("course_kit/serve_guard", "course_kit/decode_kernels")) for n in names), \
        "a stale build/lib leaked into the wheel"
    assert not any("/tests/" in n or n.startswith("instructor/") for n in names)
