"""Widget callbacks of notebook 01, headless: moving a control changes the figure and the text."""
from __future__ import annotations

import math

import pytest

from course_kit import dtypes
from course_kit.dtypes.memory import GB
from course_kit.widgets.dtypes import OpExplorer, OverflowExplorer
from course_kit.widgets.memory import MemoryEstimator, estimate


def _marker_xs(fig):
    return next(t.x for t in fig.data if t.name == "stored")


def _bits(fig):
    return "".join(next(t.text for t in fig.data if t.name.endswith(" bits")))


def test_slider_changes_figure_and_text():
    e = OverflowExplorer(value=100.0, fmt="fp8_e4m3fn")
    table0, xs0 = e.table.value, _marker_xs(e.figure)
    e.slider.value = 1e5
    assert e.table.value != table0
    assert _marker_xs(e.figure) != xs0
    assert "1e+05" in e.figure.layout.annotations[0].text
    # the explorer's outcome equals torch's own cast, per format
    for r in e.results:
        assert r == dtypes.classify(1e5, r.format)
    e4m3 = next(r for r in e.results if r.format == "fp8_e4m3fn")
    assert e4m3.outcome in ("saturated", "NaN")
    assert "overflow to inf" in e.table.value          # fp16 and e5m2 at 1e5


def test_sign_and_format_selector():
    e = OverflowExplorer(value=3.0, fmt="bf16")
    bits0 = _bits(e.figure)
    e.format.value = "fp16"
    assert _bits(e.figure) != bits0 and len(_bits(e.figure)) == 16
    assert 'data-format="fp16"' in e.table.value and "#fff3cd" in e.table.value
    e.sign.value = "-"
    assert e.x == -3.0 and _bits(e.figure)[0] == "1"


def test_explorer_bad_input():
    with pytest.raises(ValueError, match="lo=nan"):
        OverflowExplorer(lo=math.nan)
    with pytest.raises(ValueError, match="lo < hi"):
        OverflowExplorer(lo=1e5, hi=1e2, value=1e3)
    with pytest.raises(ValueError, match="unknown format 'fp7'"):
        OverflowExplorer(fmt="fp7")
    with pytest.raises(ValueError, match="outside the slider's range"):
        OverflowExplorer(value=1e50)


def test_op_explorer():
    o = OpExplorer(op="exp", x=5.0)
    text0, fig0 = o.table.value, o.figure.to_dict()
    o.x_lin.value = 12.0
    assert o.table.value != text0 and "overflow to inf" in o.table.value
    assert o.figure.to_dict() != fig0
    o.op.value = "sum"
    o.n.value = 1000
    bf16 = next(r for r in o.results if r.format == "bf16")
    assert bf16.value == 256.0 and bf16.outcome == "lost precision"
    assert o.figure.layout.xaxis.title.text == "number of terms summed"
    with pytest.raises(ValueError, match="unknown operation"):
        OpExplorer(op="cube")


def test_memory_estimator_callbacks():
    w = MemoryEstimator(model="7b", mode="inference", dtype="bf16", seq=0, batch=0)
    assert "TP=1: <b>12.6 GiB</b>" in w.text.value          # 6.74e9 params * 2 bytes / 2**30
    assert ", in GiB" in w.text.value and w.flash.disabled           # inference: no activations
    ys0 = [t.y for t in w.figure.data]
    w.dtype.value = "int4"
    assert "TP=1: <b>3.1 GiB</b>" in w.text.value
    assert [t.y for t in w.figure.data] != ys0
    w.model.value = "70b"
    w.mode.value = "training, mixed-precision Adam"
    totals = {k: sum(v.values()) for k, v in w.configs.items()}
    assert totals["TP=8"] == pytest.approx(16 * 68_976_648_192 / 8)
    assert "does not fit" in w.text.value
    names = {t.name for t in w.figure.data}
    assert {"weights", "gradients", "master weights", "optimizer moments"} <= names
    w.mode.value = "inference"
    w.gpu.value = "H200"
    assert "TP=1" in w.text.value and "fits (" in w.text.value      # 70B bf16 weights, 128.5 GiB


def test_explorer_table_pads_cells_and_prints_integers_without_minus_zero():
    e = OverflowExplorer(value=-0.1, fmt="int8")
    assert "padding" in e.table.value
    stored = dict(zip([r.format for r in e.results],
                      [c.split("</td>")[0].split(">")[-1] for c in e.table.value.split('class="ck-stored"')[1:]]))
    assert stored["int8"] == "0" and stored["int4"] == "0"
    assert stored["bf16"].startswith("-0.")


def test_memory_estimate_bad_input():
    with pytest.raises(ValueError, match="unknown mode"):
        estimate("7b", "serving")
    with pytest.raises(ValueError, match="unknown model"):
        MemoryEstimator(model="13b")
    assert sum(estimate("7b", "inference", "fp32")["TP=2"].values()) / GB == \
        pytest.approx(6.738415616 * 4 / 2)


def test_memory_estimator_uses_flash_attention_by_default_and_names_the_source():
    """Issue 42: a 1B model at 48k tokens showed ~18 TB of activations, every layer's 48k x 48k
    softmax output. With flash attention (default, and what training at that length uses) those are
    not stored; the checkbox brings them back, and the text says which formula is used."""
    w = MemoryEstimator(model="1b", mode="training, mixed-precision Adam", seq=49152, batch=8)
    assert not w.flash.disabled and w.flash.value
    act = w.configs["TP=1"]["activations"]
    assert 200 * 2**30 < act < 1000 * 2**30                       # hundreds of GiB, not 18 TiB
    assert "Korthikanti" in w.text.value and "with flash attention" in w.text.value
    w.flash.value = False
    assert w.configs["TP=1"]["activations"] > 10 * 2**40        # the s x s softmax outputs: > 10 TiB
    assert "without flash attention" in w.text.value
    assert estimate("1b", "training, mixed-precision Adam", seq=49152, batch=8)["TP=1"]["activations"] == act


def test_op_explorer_says_why_n_is_off():
    e = OpExplorer(op="exp", x=12.0)
    assert e.n.disabled and "n is off: exp(x) takes x alone" in e.n_note.value
    e.op.value = "sum"
    assert not e.n.disabled and e.n_note.value == ""
    before = e.results[0].value
    e.n.value = 300                                  # n now changes what sum computes (fp32: 300)
    assert e.results[0].value != before and e.results[0].reference == 300.0
    e.op.value = "square"
    assert e.n.disabled and "x²" in e.n_note.value
