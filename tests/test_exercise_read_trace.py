"""05.read_trace: the notebook's solution passes the public and the hidden check; near misses fail the
hidden one; the public one checks the form only and never needs the values (issue 40 item 3)."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
from grading_fixtures import fails, solution_namespace

from course_kit import grading, nbbuild
from course_kit.grading.checks import registry
from course_kit.profiling import step_table

registry.load_hidden(Path(nbbuild.PROJECT) / "instructor" / "hidden_checks", {"05"})


@pytest.fixture(scope="module")
def answer():
    step, _ = step_table.exercise_step()
    ns = solution_namespace("05", "05.read_trace", namespace={"STEP": step})
    return {"id": step_table.step_id(step), **{k: ns[k] for k in ("DOMINANT", "GAP_SHARE", "FIX", "GAIN")}}


def _args(a, **change):
    a = {**a, **change}
    return a["id"], a["DOMINANT"], a["GAP_SHARE"], a["FIX"], a["GAIN"]


def test_solution_passes_both_checks(answer):
    grading.check("05.read_trace", *_args(answer))
    grading.check("05.read_trace_hidden", *_args(answer))


def test_the_synthetic_step_needs_every_part_of_the_reading():
    """Its dominant kernel is not its longest single kernel, and two fixes are within 10%: the
    exercise cannot be answered by a glance."""
    rows = step_table.synthetic_step(0)
    longest = max(rows, key=lambda r: r["end_us"] - r["start_us"])["name"]
    ns = solution_namespace("05", "05.read_trace", namespace={"STEP": rows})
    assert ns["DOMINANT"] != longest and ns["FIX"] == "A"
    second = sorted(ns["gains"].values())[-2]
    assert 1.0 < ns["GAIN"] / second < 1.15


@pytest.mark.parametrize("change, says", [
    ({"GAP_SHARE": "x"}, "GAP_SHARE"), ({"GAP_SHARE": 1.2}, "outside"), ({"GAIN": 0.8}, "GAIN"),
    ({"FIX": "D"}, "FIX"), ({"DOMINANT": "no such kernel"}, "DOMINANT"), ({"id": "0" * 12}, "TRACE_ID"),
])
def test_public_check_catches_malformed_answers(answer, change, says):
    fails("05.read_trace", *_args(answer, **change), says=says)


def test_near_misses_fail_the_hidden_check(answer):
    a = answer
    fails("05.read_trace_hidden", *_args(a, GAP_SHARE=a["GAP_SHARE"] * 1.01), says="GAP_SHARE")
    fails("05.read_trace_hidden", *_args(a, GAIN=a["GAIN"] * 0.99), says="GAIN")
    others = [f for f in "ABC" if f != a["FIX"]]
    fails("05.read_trace_hidden", *_args(a, FIX=others[0]), says="FIX")
    step = step_table.candidates()[a["id"]]
    longest = max(step, key=lambda r: r["end_us"] - r["start_us"])["name"]
    fails("05.read_trace_hidden", *_args(a, DOMINANT=longest), says="DOMINANT")      # the longest call
    # the gaps divided by the kernels' busy time instead of the span
    fails("05.read_trace_hidden", *_args(a, GAP_SHARE=a["GAP_SHARE"] / (1 - a["GAP_SHARE"])), says="GAP_SHARE")


def test_public_checker_holds_no_oracle():
    from course_kit.grading.checks import nb05
    text = Path(nb05.__file__).read_text()
    assert "GRAPH_GAP_US" not in text and "def truth" not in text and "1.0 µs" not in text
    assert math.isfinite(step_table.synthetic_step(0)[-1]["end_us"])
