"""Every checker: the instructor's answer passes, and a near miss fails (off by a little: 1%, one
ulp where exactness matters, one element), with a short message that never shows the expected value.

Answers are written here, independently of the notebooks, and run through `grading.check` exactly
as a learner's notebook does (answer -> data -> checker).
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from course_kit import grading
from course_kit.grading.checks import registry

HIDDEN = Path(__file__).resolve().parents[1] / "instructor" / "hidden_checks"
registry.load_hidden(HIDDEN)


def _fails(exercise_id, *values, says=None):
    with pytest.raises(grading.CheckFailed) as info:
        grading.check(exercise_id, *values)
    msg = info.value.message
    if says:
        assert says in msg, msg
    assert "\n" not in msg and len(msg) < 400
    return msg


def _passes(exercise_id, *values):
    grading.check(exercise_id, *values)


# ---- answers ------------------------------------------------------------------------------------

class Exportable(torch.nn.Module):
    def forward(self, x):
        peak = x.abs().amax()
        return torch.cond(peak > 1.0, lambda t, p: t / p, lambda t, p: t * 2, (x, peak))


class ExportableNearMiss(torch.nn.Module):   # a peak of exactly 1 takes the wrong branch
    def forward(self, x):
        peak = x.abs().amax()
        return torch.where(peak >= 1.0, x / peak, x * 2)


# ---- tests --------------------------------------------------------------------------------------

# The exercises of 00, 01, 02 and 03 (00.decode_batch, 01.fp8_round, 01.predict_overflow,
# 01.overflow_point, 01.memory, 02.rescue_scale, 02.unscale_clip, 03.fullgraph, 03.recompiles) are
# tested in tests/test_exercises_nb00_03.py, from the notebooks' own solutions.


def test_04_exportable_and_hidden():
    _passes("04.exportable", Exportable)
    _passes("04.exportable_hidden", Exportable)
    _fails("04.exportable_hidden", ExportableNearMiss)
    from course_kit.capture.methods import ClipOrScale
    _fails("04.exportable", ClipOrScale, says="export")


# 04.silent_trap and the exercises of 05 (05.choose_buckets, 05.bucket_waste), 06 (06.prefix_admit,
# 06.first_preempt) and 07 (07.async_bound, 07.overlap_predict) are tested in
# tests/test_exercises_nb04_07.py, from the notebooks' own solutions.


# 08's checkers (08.merge_states, 08.causal_traffic) are tested in tests/test_exercises_nb08.py,
# through the notebook's own Triton launcher.


def test_99_selftest_exercises():
    _passes("99.add", lambda a, b: a + b)
    _fails("99.add", lambda a, b: a + b + (a == 10))                # one case off by one
    _passes("99.square", [0, 1, 4, 9, 16])
    _fails("99.square", [0, 1, 4, 9, 17])
    _passes("99.half", lambda x: x * 0.5)
    _fails("99.half", lambda x: x * 0.505)
    _fails("99.half", lambda x: (x * 0.5).double(), says="dtype is wrong")


# The exercises of 09 (09.column_backward, 09.interleaved_bubble) and 10 (10.first_rung) are
# tested in tests/test_exercises_nb09_10.py, from the notebooks' own solutions.


def test_every_public_exercise_has_a_hint_and_a_test_here():
    registry.load_public()
    public = {i for i, s in registry.SPECS.items() if not s.checker.__module__.startswith("_course_kit_hidden")}
    assert all(registry.SPECS[i].hint for i in public), [i for i in public if not registry.SPECS[i].hint]
    tested = {i for i in public if i.replace(".", "_")[:2] in Path(__file__).read_text()}
    assert tested == public


def test_hint_prints_the_exercise_hint(capsys):
    grading.hint("08.causal_traffic")
    assert "tile_counts" in capsys.readouterr().out
    with pytest.raises(ValueError, match="unknown exercise"):
        grading.hint("08.nope")


def test_failure_renders_without_traceback():
    with pytest.raises(grading.CheckFailed) as info:
        grading.check("01.memory", 0, 0.0, 0.0, 0.0)
    lines = info.value._render_traceback_()
    assert len(lines) == 2 and "01.memory" in lines[0] and "hint" in lines[1]


def test_full_feedback_shows_the_expected_value_and_short_does_not():
    from course_kit.grading.checks import codec, probing, verdict
    spec = registry.get("01.memory")
    n = registry.key("01.memory")["n_params"]
    plan = {"cases": None, "instantiate": False, "probe": None}
    answer = codec.roundtrip(probing.probe(plan, (n + 1, (n + 1) * 2 / 2**30, (n + 1) * 16 / 2**30, 7.0)))
    short = verdict.outcome(spec, answer, level="short")
    full = verdict.outcome(spec, answer, level="full")
    assert short[0] == full[0] == "failed"
    assert "expected" not in short[1] and f"(expected {n})" in full[1], (short, full)


# ---- NaN in the judge's tensor comparison (issue 39) ----------------------------------------------

@pytest.mark.parametrize("exact", [True, False])
def test_a_nan_answer_never_matches_a_number_and_nan_matches_nan(exact):
    from course_kit.grading.checks import feedback
    nan = float("nan")
    want = torch.tensor([1.0, 2.0, 3.0])
    for found in (torch.tensor([nan, 2.0, 3.0]), torch.full((3,), nan)):
        with pytest.raises(grading.Wrong, match="NaN where the right value is a number"):
            feedback.tensor(found, want, "x", exact=exact)
    with pytest.raises(grading.Wrong, match="1 of 3 values are wrong"):      # a number where NaN is right
        feedback.tensor(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1.0, nan, 3.0]), "x", exact=exact)
    # NaN means "no number here" in both: the same positions pass, exactly or within tolerance
    feedback.tensor(torch.tensor([1.0, nan, 3.0]), torch.tensor([1.0, nan, 3.0]), "x", exact=exact)
    feedback.tensor(torch.tensor([float("inf"), -float("inf")]), torch.tensor([float("inf"), -float("inf")]), "x",
                    exact=exact)


def test_feedback_fields_names_every_wrong_field_and_keeps_expected_apart():
    from course_kit.grading.checks import feedback
    wrong = feedback.Fields()
    with wrong.field():
        feedback.number(1.0, 2.0, "A")
    with wrong.field():
        feedback.number(3.0, 3.0, "B")
    with wrong.field():
        feedback.expect(False, "C: wrong", "zz", "y")
    with pytest.raises(grading.Wrong) as info:
        wrong.done()
    assert info.value.render("short") == "A: 1 is not within 1e-07% of the right value; C: wrong: found 'y'"
    assert info.value.render("full").endswith("(expected 2; 'zz')")
