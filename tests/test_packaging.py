"""pyproject, Binder and CI files agree with each other."""
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _name(req: str) -> str:
    return re.split(r"[<>=!~;\[ ]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


def test_torch_is_unpinned_enough_for_colab():
    torch_req = next(r for r in PYPROJECT["project"]["dependencies"] if _name(r) == "torch")
    assert "==" not in torch_req and "<" not in torch_req, torch_req


def test_binder_requirements_match_pyproject():
    lines = [l.strip() for l in (ROOT / "binder" / "requirements.txt").read_text().splitlines()
             if l.strip() and not l.startswith("#")]
    assert any(l.startswith("--extra-index-url https://download.pytorch.org/whl/cpu") for l in lines)
    binder = {_name(l): l for l in lines if not l.startswith("--")}
    assert re.fullmatch(r"torch==[\d.]+\+cpu", binder["torch"]), "Binder must take a CPU build of torch"
    wanted = PYPROJECT["project"]["dependencies"] + PYPROJECT["project"]["optional-dependencies"]["lab"]
    for req in wanted:
        assert _name(req) in binder, f"binder/requirements.txt lacks {req}"
        if _name(req) != "torch":
            assert binder[_name(req)].replace(" ", "") == req.replace(" ", ""), f"{binder[_name(req)]} != {req}"
    post = (ROOT / "binder" / "postBuild").read_text()
    assert "pip install --no-deps -e ." in post


def test_console_script_and_ci():
    assert PYPROJECT["project"]["scripts"]["course-kit"] == "course_kit.cli:main"
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    quickstart = readme.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    assert "make lab" in quickstart and "make test" in quickstart


LAB = PYPROJECT["project"]["optional-dependencies"]["lab"]
TEST = PYPROJECT["project"]["optional-dependencies"]["test"]


def test_license_is_an_spdx_expression_with_a_setuptools_that_reads_it():
    assert PYPROJECT["project"]["license"] == "MIT"
    backend = next(r for r in PYPROJECT["build-system"]["requires"] if _name(r) == "setuptools")
    floor = re.search(r">=\s*(\d+)", backend)
    assert floor and int(floor.group(1)) >= 77, f"setuptools < 77 rejects license = \"MIT\": {backend}"


def test_setuptools_builds_the_metadata_without_license_warnings(tmp_path):
    setuptools = __import__("setuptools")
    if int(setuptools.__version__.split(".")[0]) < 77:
        import pytest
        pytest.skip(f"setuptools {setuptools.__version__} here is older than the pinned backend")
    import shutil, subprocess, sys
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / "course_kit").mkdir()
    (tmp_path / "course_kit" / "__init__.py").write_text("")
    (tmp_path / "meta").mkdir()
    code = ("import sys; from setuptools import build_meta as b; "
            "print(b.prepare_metadata_for_build_wheel(sys.argv[1]))")
    out = subprocess.run([sys.executable, "-W", "always", "-c", code, str(tmp_path / "meta")], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "license" not in out.stderr.lower(), out.stderr
    meta = (tmp_path / "meta" / out.stdout.strip().splitlines()[-1] / "METADATA").read_text()
    assert "License-Expression: MIT" in meta


def test_lab_installs_triton_like_test_and_binder():
    triton = [r for r in TEST if _name(r) == "triton"]
    assert triton and triton[0] in LAB, "the lab extra must install triton where the test extra does"
    binder = [l.strip() for l in (ROOT / "binder" / "requirements.txt").read_text().splitlines()]
    assert triton[0] in binder


# Modules a notebook imports -> the distribution that provides them, when its name differs or it
# comes in through another requirement (IPython through ipykernel).
PROVIDED_BY = {"IPython": "ipykernel", "ipywidgets": "ipywidgets", "google": None}


def test_every_module_a_notebook_imports_is_installed_by_make_lab():
    import ast
    import sys
    wanted = {_name(r) for r in PYPROJECT["project"]["dependencies"] + LAB}
    missing = []
    for src in sorted((ROOT / "notebooks" / "src").glob("[0-9][0-9]_*.py")):
        for node in ast.walk(ast.parse(src.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else []
            for name in names:
                top = name.split(".")[0]
                if top in sys.stdlib_module_names or top == "course_kit":
                    continue
                dist = PROVIDED_BY.get(top, top)
                if dist is not None and _name(dist) not in wanted:
                    missing.append(f"{src.name}: {top}")
    assert not missing, f"make lab does not install: {sorted(set(missing))}"


def test_an_editable_install_has_no_import_hook_warning(tmp_path):
    """setuptools' default for a flat layout is an import hook that warns about 'folders in your working
    directory with the same name as your package'; the package-dir mapping gives a plain .pth."""
    import shutil, subprocess, sys
    setuptools = __import__("setuptools")
    if int(setuptools.__version__.split(".")[0]) < 77:
        import pytest
        pytest.skip(f"setuptools {setuptools.__version__} here is older than the pinned backend")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / "course_kit" / "sub").mkdir(parents=True)
    (tmp_path / "course_kit" / "__init__.py").write_text("")
    (tmp_path / "course_kit" / "sub" / "__init__.py").write_text("")
    (tmp_path / "course_kit.egg-info").mkdir()                   # a folder named like the package
    code = "import sys; from setuptools import build_meta as b; print(b.build_editable(sys.argv[1]))"
    out = subprocess.run([sys.executable, "-W", "always", "-c", code, str(tmp_path / "wheel")], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "same name as your package" not in out.stdout + out.stderr
    import zipfile
    wheel = next((tmp_path / "wheel").glob("*.whl"))
    pth = [n for n in zipfile.ZipFile(wheel).namelist() if n.endswith(".pth")]
    assert pth and "finder" not in " ".join(zipfile.ZipFile(wheel).namelist())


def test_the_readme_teaches_the_learners_path():
    readme = (ROOT / "README.md").read_text()
    path = readme.split("## The learner's path", 1)[1].split("\n## ", 1)[0]
    for needed in ("NotImplementedError", "grading.check", "grading.hint(", "make solved", "build/solved",
                   "make wheel", "Runtime → Restart"):
        assert needed in path, f"the learner's path does not mention {needed}"
    quick = readme.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    assert ".venv/bin/course-kit" in quick and "download.pytorch.org/whl/cpu" in quick and "cannot be reached" in quick
