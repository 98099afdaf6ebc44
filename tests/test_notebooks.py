"""Notebook conventions (DESIGN.md's anatomy): built from source, no outputs, parameters, badges, setup."""
import json
import re

import pytest

from course_kit import nbbuild

NOTEBOOKS = sorted(nbbuild.NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


def test_every_notebook_has_a_source_and_is_up_to_date():
    assert NOTEBOOKS, "no notebooks found"
    for nb in NOTEBOOKS:
        src = nbbuild.SOURCES / (nb.stem + ".py")
        assert src.is_file(), f"{nb.name} has no source {src}"
        assert nb.read_text() == nbbuild.render(src), f"{nb.name} is stale: run python -m course_kit.nbbuild"


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.stem)
def test_anatomy(nb):
    cells = json.loads(nb.read_text())["cells"]
    code = [c for c in cells if c["cell_type"] == "code"]
    assert not any(c["outputs"] or c["execution_count"] for c in code), "committed with outputs"
    assert any("parameters" in c["metadata"].get("tags", []) for c in code), "no 'parameters' cell"
    first = "".join(cells[0]["source"])
    assert first.startswith("# "), "the first cell is the title"
    text = "".join("".join(c["source"]) for c in cells)
    assert nbbuild.badges(nb.name) in text, "badges (or, unpublished, the Colab upload line) missing"
    assert nbbuild.setup_cell() in text, "setup cell is not the standard one (from [project.urls] Repository)"
    assert "device.describe()" in text
    # Speed-ups are computed in the run, never typed into prose.
    prose = "".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    assert not re.search(r"\b\d+(\.\d+)?\s?(x|×)\s+(faster|speed-?up)", prose)


SOURCES = sorted(nbbuild.SOURCES.glob("[0-9][0-9]_*.py"))


@pytest.mark.parametrize("src", SOURCES, ids=lambda p: p.stem)
def test_exercises_are_complete_in_the_solved_build(src):
    cells = nbbuild.build(src, solved=True)["cells"]
    roles: dict[str, set] = {}
    for c in cells:
        meta = c["metadata"].get("course_kit")
        if meta:
            roles.setdefault(meta["exercise"], set()).add(meta["role"])
            if meta["role"] == "solution":
                src_text = "".join(c["source"])
                assert "### BEGIN SOLUTION" in src_text and "### END SOLUTION" in src_text
                assert isinstance(meta.get("points"), (int, float)) and meta["points"] > 0
            if meta["role"] == "check":
                assert f'check("{meta["exercise"]}"' in "".join(c["source"])
    for ex, found in roles.items():
        assert {"solution", "check"} <= found, f"exercise {ex} lacks {({'solution', 'check'} - found)}"
        assert ex.startswith(src.stem[:2] + "."), f"exercise id {ex} does not start with the notebook number"


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_learners_build_holds_stubs_not_solutions(nb):
    """What the badges open: no solution, no hidden check; exercise and check cells may raise."""
    text = nb.read_text()
    assert "BEGIN SOLUTION" not in text and "END SOLUTION" not in text
    for c in json.loads(text)["cells"]:
        meta = c["metadata"].get("course_kit") or {}
        tagged = nbbuild.RAISES in c["metadata"].get("tags", [])
        assert meta.get("role") != "hidden", f"hidden cell of {meta.get('exercise')} in the learner's build"
        assert tagged == (meta.get("role") in ("solution", "check")), \
            f"raises-exception must tag exactly the exercise and check cells: {''.join(c['source'])[:60]!r}"
        if meta.get("role") == "solution":
            assert f'raise NotImplementedError("Exercise {meta["exercise"]}: ' in "".join(c["source"])


def test_setup_cell_never_reinstalls_torch():
    setup = nbbuild.setup_cell("https://github.com/o/r")
    assert "colab.setup(SOURCE)" in setup and "git\", \"clone" in setup
    assert not re.search(r"pip\"?, \"install\"[^\n]*\"torch", setup)


def test_parse_rejects_text_before_the_first_marker(tmp_path):
    with pytest.raises(ValueError, match="before the first"):
        nbbuild.parse("x = 1\n# %%\n")
