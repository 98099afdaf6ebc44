"""Notebook 01's explainers: range against precision (issue 19 item 11) and measured matmul rates
against the datasheet (item 12), both directions, on the real H200 record too."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from course_kit.dtypes.explain import explain_range_precision, explain_throughput

REC = json.loads((Path(__file__).resolve().parents[1] / "data/reference/h200/dtypes.json").read_text())


def test_bf16_pays_for_range_with_precision_in_either_order():
    for a, b in (("fp16", "bf16"), ("bf16", "fp16")):
        t = explain_range_precision(a, b)
        assert "bf16 pays for that range with precision" in t and "fp16 pays" not in t
        assert "8x coarser" in t and "65504" in t
    fp8 = explain_range_precision("fp8_e4m3fn", "fp8_e5m2")
    assert "fp8_e5m2 pays" in fp8 and "448" in fp8


def test_range_and_precision_together_and_bad_input():
    t = explain_range_precision("fp32", "fp16")          # fp32 wins both
    assert "also the more precise" in t and "pays" not in t
    assert "same max" in explain_range_precision("bf16", "bf16")
    with pytest.raises(ValueError, match="floating-point"):
        explain_range_precision("int8", "fp16")


def test_throughput_on_the_h200_record_names_int8_short_of_its_datasheet_ratio():
    t = explain_throughput(REC["summary"], REC["results"], "NVIDIA H200", 8192)
    int8 = next(line for line in t.splitlines() if line.startswith("- int8"))
    r = REC["summary"]["int8_over_bf16"]
    assert 1 < r < 2                       # faster than bf16, short of the datasheet's 2x
    assert f"{r:.2f}x faster than bf16" in int8 and "2.00x bf16's" in int8 and "fell short" in int8
    fp16 = next(line for line in t.splitlines() if line.startswith("- fp16"))
    r16 = REC["summary"]["fp16_over_bf16"]      # the same datasheet peak as bf16: never "fell short" of it
    assert (f"{1 / r16:.2f}x slower than bf16" if r16 < 0.97 else "about as fast as") in fp16
    assert "fell short" not in fp16
    fp32 = next(line for line in t.splitlines() if line.startswith("- fp32"))
    assert "slower than bf16" in fp32


def test_throughput_when_a_format_meets_its_ratio_or_bf16_is_missing():
    rows = [{"name": "bf16", "variant": "bf16", "tflops": 500.0, "peak_tflops": 1000.0, "fraction_of_peak": 0.5},
            {"name": "int8", "variant": "int8", "tflops": 1000.0, "peak_tflops": 2000.0, "fraction_of_peak": 0.5}]
    t = explain_throughput({}, rows, "GPU")
    assert "2.00x faster than bf16" in t and "fell short" not in t
    assert "no bf16" in explain_throughput({}, rows[1:], "GPU")


def test_weight_only_sentence_both_directions_and_skips():
    from course_kit.dtypes.explain import explain_weight_only
    base = {"m": 16, "n": 8192, "weight_bytes": 2 * 8192**2}
    rows = [dict(base, kind="bf16", median_s=100e-6, weight_gbs=1342.0),
            dict(kind="int8", median_s=60e-6, weight_bytes=8192**2, weight_gbs=1118.0, kernel="k8",
                 rel_error_vs_dequantised=2e-3, quantisation_error=0.007, group_size=None),
            dict(kind="int4", median_s=150e-6, weight_bytes=8192**2 // 2, weight_gbs=224.0, kernel="k4",
                 rel_error_vs_dequantised=2e-3, quantisation_error=0.1, group_size=128)]
    t = explain_weight_only(rows, "On the GPU")
    assert "1.67x faster than** bf16" in t and "1.50x slower than** bf16" in t and "groups of 128" in t
    rows[2] = {"kind": "int4", "skipped": "RuntimeError: no kernel"}
    assert "not run here (RuntimeError" in explain_weight_only(rows, "X")
    assert "not measured" in explain_weight_only(rows[1:], "X")
