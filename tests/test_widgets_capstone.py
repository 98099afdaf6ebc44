"""Notebook 10's live-run details (issue 42 item 7): no "null" tooltips, readable axis and bar labels."""
from __future__ import annotations

from course_kit.plots import capstone as cplots, streams as splots
from course_kit.widgets.capstone import TechniqueLadder


def test_every_control_has_a_tooltip():
    w = TechniqueLadder(None)
    assert all(t.tooltip for t in w.toggles.values()) and w.run.tooltip


def test_live_figure_is_linear_and_bars_read_plain_numbers():
    fig = cplots.live_figure({"HF generate": 3120.4, "engine": 4410.0}, title="live")
    assert fig.layout.yaxis.type in (None, "linear") and fig.data[0].text == ("3,120", "4,410")
    bars = splots.bars([{"name": "a", "t": 3120.4}, {"name": "b", "t": 12.345}], "name", "t")
    assert bars.data[0].text == ("3,120", "12.3") and "e+" not in "".join(bars.data[0].text)
