"""Notebook 00: placing an op under the measured ceilings, the copy sentence, and the explorer widget."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from course_kit.roofline import ceilings as R
from course_kit.widgets.roofline import RooflineExplorer

REF = json.loads((Path(__file__).resolve().parents[1] / "data/reference/h200/roofline.json").read_text())
CPU = {"summary": {"copy_gbs": 20.0, "matmul_tflops": {"fp32": 0.5}}}


def test_op_costs_by_hand():
    mm = R.op_cost("square matmul n x n x n", 1024, "bf16")
    assert mm["flops"] == 2 * 1024**3 and mm["bytes"] == 3 * 1024**2 * 2
    assert mm["intensity"] == pytest.approx(1024 / 3)
    mv = R.op_cost("matrix-vector (decode, n x n weights)", 4096, "bf16", batch=1)
    assert mv["intensity"] == pytest.approx(2 * 4096**2 / ((4096**2 + 2 * 4096) * 2))   # about 1 FLOP/B
    mv16 = R.op_cost("matrix-vector (decode, n x n weights)", 4096, "bf16", batch=16)
    assert mv16["intensity"] > 15 * mv["intensity"]
    add = R.op_cost("vector add x + y", 1000, "fp32")
    assert add["intensity"] == pytest.approx(1 / 12)
    with pytest.raises(ValueError, match="unknown op"):
        R.op_cost("conv", 8)
    with pytest.raises(ValueError, match="unknown dtype"):
        R.op_cost("vector add x + y", 8, "fp64")
    with pytest.raises(ValueError, match="n and batch"):
        R.op_cost("vector add x + y", 0)


def test_place_memory_and_compute_bound_on_the_h200_record():
    bw, ceil = REF["summary"]["copy_gbs"], REF["summary"]["matmul_tflops"]
    decode = R.place(R.op_cost("matrix-vector (decode, n x n weights)", 4096, "bf16"), bw, ceil)
    assert decode["bound"] == "memory" and decode["ridge"] == pytest.approx(ceil["bf16"] * 1e3 / bw)
    assert decode["attainable_tflops"] < ceil["bf16"] / 100
    big = R.place(R.op_cost("square matmul n x n x n", 8192, "bf16"), bw, ceil)
    assert big["bound"] == "compute" and big["attainable_tflops"] == ceil["bf16"]
    fp8 = R.place(R.op_cost("square matmul n x n x n", 8192, "fp8"), bw, ceil)
    assert fp8["substituted"] and fp8["ceiling_dtype"] == max(ceil, key=ceil.get)
    with pytest.raises(ValueError):
        R.place(R.op_cost("vector add x + y", 8), 0.0, ceil)


def test_explain_place_and_copy_both_directions():
    c = R.op_cost("matrix-vector (decode, n x n weights)", 4096, "bf16")
    bw, ceil = REF["summary"]["copy_gbs"], REF["summary"]["matmul_tflops"]
    here, ref = R.place(c, 20.0, {"fp32": 0.5}), R.place(c, bw, ceil)
    t = R.explain_place(c, here, ref, "this CPU", "the H200")
    assert "memory-bound" in t and "faster than here" in t and "its fp32 ceiling is used" in t
    t2 = R.explain_place(c, ref, here, "the H200", "this CPU")
    assert "slower than here" in t2
    # the reference that is 1.49x this machine's rate is never rounded to "1x"
    assert "1.49x faster than this machine" in R.explain_copy(2864.0, 4262.0, "H200")
    assert "slower than this machine" in R.explain_copy(5000.0, 4262.0, "H200")
    assert "about as fast as" in R.explain_copy(4262.0, 4262.0, "H200")


def test_roofline_explorer_controls_change_figure_and_text():
    e = RooflineExplorer(CPU, REF, ref_name="the H200")
    text0, x0 = e.text.value, e.figure.data[2].x
    assert "memory-bound" in text0 and len(e.places) == 2
    e.batch.value = 256
    assert e.text.value != text0 and e.figure.data[2].x != x0
    e.op.value = "square matmul n x n x n"
    assert e.batch.disabled and "compute-bound" in e.text.value
    e.log2_n.value = 5
    assert e.cost["n"] == 32
    with pytest.raises(ValueError, match="log2_n"):
        RooflineExplorer(CPU, log2_n=30)


def test_explain_timing_both_ways():
    t = R.explain_timing(0.117, 0.031, 0.09, 30, 20e-6)
    assert "3.77x slower than a warm one" in t and "1,550x shorter" in t
    assert "faster than a warm one" in R.explain_timing(0.02, 0.06, 0.7, 5)
    assert "not shorter" in R.explain_timing(0.1, 0.001, 0.1, 5, 0.002)
