"""Figures, the TP trade-off widget and the decode-step model (one process, no ranks)."""
import plotly.graph_objects as go
import pytest

from course_kit.dtypes import memory
from course_kit.parallel import pipeline
from course_kit.plots import parallel as pplots
from course_kit.widgets.parallel import TPTradeoff, tradeoff


def _record():
    rows = [{"name": "all_reduce", "op": "all_reduce", "n": 2, "bytes": b, "median_s": 1e-5 + b / 3e11,
             "busbw_GBps": b / (1e-5 + b / 3e11) / 1e9} for b in (1 << 10, 1 << 20, 1 << 28)]
    rows += [{"name": "tp_mlp", "tp": t, "median_s": 8e-3 / t, "speedup": float(t)} for t in (1, 2)]
    rows += [{"name": "decode", "model": "llama-1b", "tp": t, "tokens_per_s": 900.0 * t ** 0.5,
              "s_per_token": 1 / (900.0 * t ** 0.5), "speedup": t ** 0.5, "mode": "cuda_graph",
              "fp32_tokens_identical": True} for t in (1, 2)]
    rows += [{"name": "pipeline", "schedule": k, "p": 2, "m": m, "bubble": 0.4, "theory": 1 / (m + 1)}
             for k in pipeline.SCHEDULES for m in (1, 4)]
    return {"results": rows, "summary": {"world_sizes": [1, 2]}}


def test_figures_from_a_record():
    rec = _record()
    fig = pplots.busbw_figure({"x": rec["results"]}, model={"alpha_s": 1e-5, "bandwidth_Bps": 3e11, "n": 2})
    assert len(fig.data) == 2 and fig.layout.xaxis.type == "log"
    assert isinstance(pplots.scaling_figure({"a": rec}), go.Figure)
    mlp = pplots.scaling_figure({"a": rec}, what="mlp")
    assert list(mlp.data[0].y) == [1.0, 2.0]
    table = pplots.tokens_table({"a": rec})
    assert table.column(1) == [1, 2] and "<table" in table._repr_html_()
    assert len(pplots.bubble_figure(rec["results"], 2).data) == 3


def test_timeline_has_one_box_per_step():
    ev = pipeline.simulate("1f1b", 2, 4)
    fig = pplots.timeline_figure(ev, unit="steps")
    assert len(fig.data) == 16 and "bubble 20%" in fig.layout.title.text


def test_widget_uses_course_kit_memory():
    w = TPTradeoff(model="70b", seq=8192)
    want = sum(memory.per_gpu_bytes("70b", 4, seq=8192, batch=1).values())
    assert sum(w.result["memory"]["TP=4"].values()) == pytest.approx(want)
    before = w.result["time"]["TP=8"]["comm_s"]
    w.hop.value = 20.0            # a slower ring step: the callback recomputes
    assert w.result["time"]["TP=8"]["comm_s"] > before
    ring = w.result["time"]["TP=8"]["comm_s"]
    w.algo.value = "one_shot"     # one barrier instead of 2(n-1) ring steps
    assert w.result["time"]["TP=8"]["comm_s"] < ring
    assert "TP=8" in w.text.value and "GiB" in w.text.value and " GB " not in w.text.value
    assert set(w.figures) == {"memory", "time"}
    with pytest.raises(ValueError, match="model"):
        tradeoff("13b")


def test_new_figures_format_their_numbers():
    from course_kit.parallel import schedules
    t = pplots.speed_table([{"machine": "m", "what": "MLP", "GPUs / ranks": 2, "time (ms)": 1234.5678,
                             "speed-up": 1.987}], title="x")
    assert t.column(3) == ["1,234.568"] and t.column(4) == ["1.99x"]
    g = pplots.gib_bars_figure({"a": {"weights": 2**31}}, title="x", capacity_bytes=2**32)
    assert list(g.data[0].y) == [2.0] and "4.0 GiB" in g.layout.annotations[0].text
    s = schedules.schedule_summary("interleaved", 2, 4, 2)
    f = pplots.schedule_figure(s["events"], title="x", theory=s["theory"])
    assert len(f.data) == 2 and f"formula {s['theory']:.1%}" in f.layout.title.text
    ft = pplots.fit_table([{"model": "a", "tp": 2, "algo": "ring", "measured_s": 1e-3, "model_s": 1.1e-3,
                            "error": 0.1}], title="x")
    assert ft.column(5) == ["+10.0%"] and ft.column(6) == ["in sample"]
    held = pplots.fit_table([], [{"model": "a", "tp": 2, "algo": "ring", "measured_s": 1e-3, "model_s": 0.9e-3,
                                  "error": -0.1, "fitted_on": "b"}], title="x")
    assert held.column(6) == ["held out (bases from b)"]


def test_capstone_waterfall_marks_switched_off_steps():
    from course_kit.capstone import ladder
    from course_kit.plots.capstone import waterfall_figure
    steps = ladder.ladder({"HF generate": 100.0, "engine: continuous + paged KV": 150.0,
                           "engine: + async loop": 300.0})
    fig = waterfall_figure(ladder.waterfall(steps, ["async loop"]), title="x")
    assert list(fig.data[0].text) == ["100", "off", "2.00x", "200 tok/s"] and "composed" in fig.layout.title.text


def test_readable_axes_and_lanes():
    """Issue 41/42: no stray minor label on the bubble's log axis, a timeline lane is tall enough to
    read and its legend sits above the plot (not clipped at the side)."""
    ev = pipeline.simulate("1f1b", 2, 16)
    fig = pplots.timeline_figure(ev, unit="steps")
    assert fig.layout.height == pplots.LANE_TOP + 2 * pplots.LANE_PX and pplots.LANE_PX >= 60
    assert fig.layout.legend.orientation == "h" and fig.layout.legend.y > 1
    rows = [{"p": 2, "m": m, "bubble": 0.3, "schedule": "gpipe"} for m in (1, 2, 4, 8, 16)]
    b = pplots.bubble_figure(rows, 2)
    assert list(b.layout.xaxis.tickvals) == [1, 2, 4, 8, 16] and list(b.layout.xaxis.ticktext) == ["1", "2", "4", "8", "16"]


def test_tp_tradeoff_figures_fit_a_column_side_by_side():
    from course_kit.widgets.parallel import FIGURE_PX, TPTradeoff
    w = TPTradeoff(model="70b", seq=8192)
    assert all(f.layout.width == FIGURE_PX for f in w.figures.values()) and 2 * FIGURE_PX + 40 <= 1100
