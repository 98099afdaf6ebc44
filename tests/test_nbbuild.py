"""The two builds of a notebook from its one source: the learner's (stubs) and the solved one."""
import json
import re

import pytest

from course_kit import colab, nbbuild

SOURCE = '''# %% [markdown]
# # 99 · A test notebook
# {{BADGES}}

# %%
{{SETUP}}

# %% {"tags": ["parameters"]}
N = 3

# %%
shared = N * 2

# %% [markdown]
# ### Exercise 99.double: double a number without using *

# %% {"course_kit": {"exercise": "99.double", "role": "solution", "points": 1}}
def double(x):
    ### BEGIN SOLUTION
    return x + x
    ### END SOLUTION

# %% {"course_kit": {"exercise": "99.double", "role": "check"}}
assert double(4) == 8

# %% {"course_kit": {"exercise": "99.double", "role": "hidden"}}
assert double(-1) == -2

# %% [markdown]
# ## Exercise: the answer

# %% {"course_kit": {"exercise": "99.answer", "role": "solution", "points": 1, "task": "set answer to  42"}}
### BEGIN SOLUTION
answer = 42
### END SOLUTION

# %% {"course_kit": {"exercise": "99.answer", "role": "check"}}
assert answer == 42

# %%
after = shared + 1
'''


@pytest.fixture
def src(tmp_path):
    path = tmp_path / "99_test.py"
    path.write_text(SOURCE)
    return path


def _text(cell):
    return "".join(cell["source"])


def test_the_learners_build_has_stubs_with_the_task_and_no_hidden_cells(src):
    nb = nbbuild.build(src)
    text = json.dumps(nb)
    assert "BEGIN SOLUTION" not in text and "x + x" not in text and "answer = 42" not in text
    assert "double(-1)" not in text, "hidden check leaked into the learner's build"
    stubs = [_text(c) for c in nb["cells"] if (c["metadata"].get("course_kit") or {}).get("role") == "solution"]
    assert 'raise NotImplementedError("Exercise 99.double: double a number without using *")' in stubs[0]
    assert stubs[0].startswith("def double(x):\n    raise")            # the signature stays
    # the task in metadata wins over the heading, with its whitespace folded to one line
    assert stubs[1] == 'raise NotImplementedError("Exercise 99.answer: set answer to 42")'


def test_raises_exception_tags_exactly_the_exercise_and_check_cells(src):
    tagged = [(c["metadata"].get("course_kit") or {}).get("role") for c in nbbuild.build(src)["cells"]
              if nbbuild.RAISES in c["metadata"].get("tags", [])]
    assert tagged == ["solution", "check", "solution", "check"]
    assert not any(nbbuild.RAISES in c["metadata"].get("tags", []) for c in nbbuild.build(src, solved=True)["cells"])


def test_the_solved_build_keeps_solutions_and_hidden_checks(src):
    text = json.dumps(nbbuild.build(src, solved=True))
    assert "### BEGIN SOLUTION" in text and "x + x" in text and "double(-1)" in text


def test_the_stub_runs_and_raises_what_it_says(src):
    nb = nbbuild.build(src)
    ns: dict = {}
    code = [_text(c) for c in nb["cells"] if c["cell_type"] == "code" and (c["metadata"].get("course_kit") or {})]
    exec(code[0], ns)
    with pytest.raises(NotImplementedError, match=r"^Exercise 99\.double: double a number"):
        ns["double"](2)


def test_ci_notebook_is_the_learner_build_then_the_solved_tail(src):
    learner, solved, ci = nbbuild.build(src), nbbuild.build(src, solved=True), nbbuild.ci_notebook(src)
    n = len(learner["cells"])
    assert ci["cells"][:n] == learner["cells"]
    start = nbbuild.first_exercise(solved)
    tail = solved["cells"][start:]            # hidden checks included (issue 47): make test runs them
    assert [(c["metadata"].get("course_kit") or {}).get("role") for c in tail].count("hidden") == 1
    assert [_text(c) for c in ci["cells"][n + 1:]] == [_text(c) for c in tail]
    ids = [c["id"] for c in ci["cells"]]
    assert len(ids) == len(set(ids)) and all(re.fullmatch(r"[A-Za-z0-9_-]{1,64}", i) for i in ids)


@pytest.mark.parametrize("src", sorted(nbbuild.SOURCES.glob("[0-9][0-9]_*.py")), ids=lambda p: p.stem)
def test_both_builds_share_every_cell_before_the_first_exercise(src):
    """Why make test may run the shared part once (nbbuild.ci_notebook)."""
    learner, solved = nbbuild.build(src), nbbuild.build(src, solved=True)
    start = nbbuild.first_exercise(solved)
    assert start is not None, f"{src.stem} has no exercise"
    assert learner["cells"][:start] == solved["cells"][:start]
    assert nbbuild.first_exercise(learner) == start


def test_solved_and_ci_options_write_into_a_folder(tmp_path, capsys):
    out = tmp_path / "solved"
    assert nbbuild.main(["00", "--solved", str(out)]) == 0
    assert "BEGIN SOLUTION" in (out / "00_start_here.ipynb").read_text()
    assert nbbuild.main(["00", "--ci", str(tmp_path / "ci")]) == 0
    ci = json.loads((tmp_path / "ci" / "00_start_here.ipynb").read_text())
    assert any(c["id"] == "solved-build" for c in ci["cells"])


def test_setup_cell_with_the_placeholder_url_looks_for_a_wheel_on_colab_only(monkeypatch, capsys, tmp_path):
    """Unpublished: no clone, no placeholder error; on Colab with no wheel it stops with two lines
    (IPython shows `_render_traceback_` instead of a traceback); published: it clones."""
    import sys
    import types
    cell = nbbuild.setup_cell(colab.PLACEHOLDER_REPOSITORY)
    assert 'REPOSITORY = ""' in cell and "placeholder" not in cell.lower() and "RuntimeError" not in cell
    exec(cell, {})                                   # outside Colab it runs through (as in CI)
    assert "torch" in capsys.readouterr().out
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    with pytest.raises(Exception) as stop:
        exec(cell.replace("/content", str(tmp_path)), {})
    lines = stop.value._render_traceback_()
    assert len(lines) == 2 and "make wheel" in lines[0] and "Upload" in lines[1]
    real = nbbuild.setup_cell("https://github.com/someone/course")
    assert 'REPOSITORY = "https://github.com/someone/course"' in real and "git\", \"clone" in real


def test_badges_need_a_published_repository():
    assert "colab.research.google.com/github/o/r/blob/main/notebooks/00_x.ipynb" in nbbuild.badges("00_x.ipynb", "https://github.com/o/r")
    unpublished = nbbuild.badges("00_x.ipynb", colab.PLACEHOLDER_REPOSITORY)
    assert "github.com" not in unpublished and "Upload notebook" in unpublished
