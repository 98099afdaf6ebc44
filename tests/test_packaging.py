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
