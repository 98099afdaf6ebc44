"""Notebook 04's capture gallery: real captures of each trap, the verdicts, and the widget."""
from __future__ import annotations

import pytest

from course_kit.capture import gallery as cg
from course_kit.widgets.capture import CaptureGallery


def test_trace_bakes_the_branch_and_script_keeps_it():
    traced = cg.gallery_cell("data-dependent branch", "jit.trace")
    assert traced["status"] == "silently wrong" and "Output differs" in traced["detail"]
    assert "TracerWarning" in traced["detail"] and "aten::mul" in traced["ir"]
    assert cg.gallery_cell("data-dependent branch", "jit.script")["status"] == "correct"
    assert cg.gallery_cell("data-dependent branch", "export")["status"] == "refused"


def test_side_effect_is_dropped_by_every_capture_that_accepts_it():
    for method in ("jit.trace", "fx", "export"):
        cell = cg.gallery_cell("Python side effect", method)
        assert cell["status"] == "silently wrong", (method, cell)
        assert "side effect ran 0 time(s) in one call (eager: 1)" in cell["detail"]


def test_a_global_is_baked_in_and_restored():
    for method in ("jit.trace", "fx", "export"):
        assert cg.gallery_cell("a global", method)["status"] == "silently wrong"
    assert cg.SCALE == 2.0                                      # the gallery leaves the global as it was


def test_in_place_on_an_input_is_replayed():
    for method in ("jit.trace", "fx", "export"):
        assert cg.gallery_cell("in-place on an input", method)["status"] == "correct"


def test_bad_names():
    with pytest.raises(ValueError, match="unknown trap"):
        cg.gallery_cell("goto", "fx")
    with pytest.raises(ValueError, match="unknown capture method"):
        cg.gallery_cell("a global", "onnx")


def test_widget_selection_changes_verdict_ir_and_grid():
    w = CaptureGallery("data-dependent branch", "jit.trace")
    text0, grid0 = w.verdict.value, w.figure.data[0].cells.values
    assert "silently wrong" in text0 and "▶ silently wrong" in grid0[1][0]
    w.method.value = "jit.script"
    assert "</span> correct</span>" in w.verdict.value and w.verdict.value != text0
    assert w.figure.data[0].cells.values != grid0
    w.trap.value = "a global"
    assert "a global" in w.verdict.value and "refused" in w.verdict.value
    assert len(w.tried) == 3
