"""course_kit.capture.methods and capture_traps: each method's behaviour, checked by running it against eager."""
from __future__ import annotations

import pytest
import torch
from torch.export import Dim

from course_kit import grading
from course_kit.capture import methods as capture, traps

CASES = {c.name: c for c in capture.CASES}


@pytest.mark.parametrize("method", capture.METHODS)
def test_every_method_captures_the_mlp_block_exactly(method):
    block, x = capture.MLPBlock(16).eval(), torch.randn(4, 16)
    cap = capture.capture(method, block, (x,), ({0: Dim("batch")},) if method == "export" else None)
    ok, diff = capture.same(block(x), cap.fn(x), atol=1e-6)
    assert ok, f"{method}: max |Δ| {diff}"
    assert capture.ir_ops(cap) and capture.ir_text(cap, lines=3).count("\n") <= 2


def test_data_dependent_branch_trace_is_silently_wrong_script_is_right_fx_and_export_refuse():
    case = CASES["data-dependent control flow"]
    assert capture.probe("jit.trace", case).status == "silently wrong"
    assert capture.probe("jit.script", case).status == "correct"
    assert capture.probe("fx", case).status == "refused"
    assert capture.probe("export", case).status == "refused"


def test_containers_and_dynamic_shapes_and_in_place():
    assert capture.probe("fx", CASES["Python containers (dict in, dict out)"]).status == "correct"
    assert capture.probe("export", CASES["Python containers (dict in, dict out)"]).status == "correct"
    # export with batch and length = 2 * half is correct at new shapes
    assert capture.probe("export", CASES["dynamic shapes (new batch and length)"]).status == "correct"
    cell = capture.probe("export", CASES["in-place ops (one on the input)"])
    assert cell.status == "correct", cell.detail


def test_probe_detects_a_wrong_mutation_of_the_input():
    class Forgets(torch.nn.Module):
        def forward(self, x):
            return x * 2
    case = capture.Case("x", capture.InPlace, lambda: (torch.ones(2, 2),), lambda: [(torch.ones(2, 2),)])
    cap = capture.Captured("fx", torch.fx.symbolic_trace(Forgets()), 0.0)
    original = capture.capture
    try:
        capture.capture = lambda *a, **k: cap
        cell = capture.probe("fx", case)
    finally:
        capture.capture = original
    assert cell.status == "silently wrong"


@pytest.mark.parametrize("method", ["jit.script", "export"])
def test_save_load_round_trip_is_bit_exact(tmp_path, method):
    block, x = capture.MLPBlock(16).eval(), torch.randn(3, 16)
    cell = capture.save_load(method, block, (x,), str(tmp_path))
    assert cell.status == "correct", cell.detail
    assert (".pt2" if method == "export" else ".pt") in cell.detail


def test_unknown_method_names_the_choices():
    with pytest.raises(ValueError, match="jit.trace"):
        capture.capture("onnx", capture.Gate(), (torch.ones(1),))


def test_traps():
    baked = traps.trace_bakes_branch()
    assert not baked["matches_eager"] and baked["traced_sum"] == pytest.approx(-2 * baked["eager_sum"], rel=1e-5)
    assert baked["warnings"], "trace warns about converting a tensor to a Python bool"
    assert all(not r["scripted"] for r in traps.script_rejects())
    refused = traps.export_refuses_data_dependent()
    assert refused["refused"]
    fixed = traps.export_with_cond()
    assert all(fixed["checks"].values()) and "cond" in fixed["code"]
    dims = traps.export_dim_constraint()
    assert dims["plain_dim"] != "accepted" and dims["derived_dim_ok"]


def test_deprecation_report_is_computed():
    report = traps.torchscript_deprecation()
    assert report["torch"] == torch.__version__
    assert all(("deprecat" in w.lower()) or w.startswith(("DeprecationWarning", "FutureWarning"))
               for w in report["warnings"])


class _CondSolution(torch.nn.Module):
    def forward(self, x):
        peak = x.abs().amax()
        return torch.cond(peak > 1.0, lambda x, p: x / p, lambda x, p: x * 2, (x, peak))


def test_exercise_check_accepts_cond_and_rejects_the_original_and_a_wrong_answer():
    grading.check("04.exportable", _CondSolution)     # the hidden check lives in instructor/hidden_checks
    with pytest.raises(AssertionError, match="export.* fails"):
        grading.check("04.exportable", capture.ClipOrScale)

    class AlwaysDouble(torch.nn.Module):
        def forward(self, x):
            return x * 2
    with pytest.raises(AssertionError, match="peak above 1"):
        grading.check("04.exportable", AlwaysDouble)


@pytest.mark.gpu
@pytest.mark.parametrize("method", capture.METHODS)
def test_every_method_captures_the_mlp_block_on_cuda(method):
    block, x = capture.MLPBlock(64).eval().cuda(), torch.randn(8, 64, device="cuda")
    cap = capture.capture(method, block, (x,), ({0: Dim("batch")},) if method == "export" else None)
    ok, diff = capture.same(block(x), cap.fn(x), atol=1e-4)  # fused kernels may round differently
    assert ok, f"{method} on CUDA: max |Δ| {diff}"
