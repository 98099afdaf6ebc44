"""Multiple-choice parts of exercises: the public check (installed with the package, so learners can
read it) checks only that the answer is one of the letters; which letter is right lives in the
instructor's hidden checks alone, and the solution's letter is what they accept."""
from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import pytest

from course_kit import grading, nbbuild
from course_kit.grading.checks import registry
from grading_fixtures import fails

# (exercise, notebook source, the solution's variable holding the letter)
CHOICE_PARTS = [("01.overflow_point", "01_dtypes_and_overflow.py", "CULPRIT"),
                ("03.recompiles", "03_torch_compile_modes.py", "WHY"),
                ("04.silent_trap", "04_graph_capture.py", "CAUSE"),
                ("07.overlap_predict", "07_async_streams.py", "CAUSE"),
                ("08.causal_traffic", "08_flash_attention.py", "CAUSE"),
                ("09.interleaved_bubble", "09_parallelism.py", "WHY"),
                ("10.first_rung", "10_capstone.py", "WHY")]


@pytest.fixture(scope="module", autouse=True)
def hidden_checks():
    registry.load_hidden(Path(nbbuild.PROJECT) / "instructor" / "hidden_checks")


@pytest.mark.parametrize("exercise, source, name", CHOICE_PARTS)
def test_the_public_checker_cannot_tell_the_letters_apart(exercise, source, name):
    registry.load_public(exercise)
    spec = registry.get(exercise)
    assert spec.later == name
    module = importlib.import_module(spec.checker.__module__)
    text = inspect.getsource(module)
    assert "_ANSWER" not in text and f'{name} = "' not in text, "a letter's answer is readable in the package"
    assert not re.search(r'"[a-dA-D]" is right|\bis [a-dA-D]\b', text), "a comment gives the letter away"
    # its hidden counterpart is defined in the instructor's tree, outside the installed package
    hidden = registry.get(f"{exercise}_hidden").checker
    where = Path(inspect.getsourcefile(hidden)).resolve()
    assert where.parent == (Path(nbbuild.PROJECT) / "instructor" / "hidden_checks").resolve()
    assert Path(grading.__file__).resolve().parents[1] not in where.parents


@pytest.mark.parametrize("exercise, source, name", CHOICE_PARTS)
def test_the_hidden_check_accepts_the_solutions_letter_only(exercise, source, name):
    [src] = sorted(nbbuild.SOURCES.glob(source))
    cells = ["".join(c["source"]) for c in nbbuild.build(src, solved=True)["cells"]
             if (c["metadata"].get("course_kit") or {}).get("exercise") == exercise
             and c["metadata"]["course_kit"].get("role") == "solution"]
    letters = [m for text in cells for m in re.findall(rf'^{name} = "([A-Da-d])"', text, re.M)]
    assert len(letters) == 1, letters
    letter = letters[0]
    hidden = f"{exercise}_hidden"
    grading.check(hidden, letter)
    grading.check(hidden, f" {letter.swapcase()} ")            # case and spaces do not matter
    for other in sorted(set("abcd" if letter.islower() else "ABCD") - {letter}):
        msg = fails(hidden, other, says=name)
        assert f"'{letter}'" not in msg and f"'{letter.swapcase()}'" not in msg   # not given away
    fails(hidden, "E", says=f"{name}: expected one of")
    fails(hidden, 3, says=f"{name}: expected one of")


def test_the_pass_line_says_the_letter_is_judged_at_grading(capsys):
    from course_kit.grading.checks import registry
    a = registry.key("07.overlap_predict")
    for letter in "ABCD":
        grading.check("07.overlap_predict", {"speedup": 1.6}, a["idle_sync"], a["idle_async"], a["bound"],
                      a["speedup"], letter)
    out = capsys.readouterr().out
    assert out.count("passed. CAUSE is judged when your instructor grades the notebook.") == 4
