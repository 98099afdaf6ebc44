"""Figures of notebook 10: the technique ladder as a waterfall (log scale: gains multiply)."""
from __future__ import annotations

from typing import Any, Mapping

import plotly.graph_objects as go

__all__ = ["waterfall_figure", "live_figure"]


def waterfall_figure(w: Mapping[str, Any], *, title: str) -> go.Figure:
    """HF generate, then one bar per technique from the throughput before it to the one after it;
    switched-off techniques are grey and flat."""
    x = ["HF generate"]
    base = [w["base"]]
    lows, highs, colors, texts = [0.0], [w["base"]], ["#7f7f7f"], [f"{w['base']:,.0f}"]
    prev = w["base"]
    for s in w["steps"]:
        x.append(s["technique"].replace(" + ", "<br>+ "))     # two short lines, no overlap
        after = s["after"]
        lo, hi = min(prev, after), max(prev, after)
        lows.append(lo)
        highs.append(hi if hi > lo else lo * 1.02)
        colors.append("#2ca02c" if s["on"] and after >= prev else ("#d62728" if s["on"] else "#d9d9d9"))
        texts.append(f"{s['gain']:.2f}x" if s["on"] else "off")
        prev = after
    x.append("result")
    lows.append(0.0)
    highs.append(w["final"])
    colors.append("#1f77b4")
    texts.append(f"{w['final']:,.0f} tok/s")
    # bars on a log axis start at the lowest value shown, not at 0
    floor = min(v for v in lows + highs if v > 0) / 2
    fig = go.Figure(go.Bar(x=x, base=[max(lo, floor) for lo in lows],
                           y=[h - max(lo, floor) for lo, h in zip(lows, highs)],
                           marker_color=colors, text=texts, textposition="outside",
                           hovertemplate="%{x}: %{text}<extra></extra>"))
    del base
    kind = "measured" if w["measured"] else "composed from recorded step gains"
    fig.update_layout(title={"text": f"{title}<br><sup>{kind}</sup>", "x": 0.02},
                      yaxis={"type": "log", "title": "output tokens / s (log)", "tickformat": ",.0f", "dtick": 1},
                      height=440, showlegend=False, margin={"t": 80, "b": 90})
    return fig


def live_figure(live: Mapping[str, float], *, title: str) -> go.Figure:
    """The live run's throughput per variant."""
    fig = go.Figure(go.Bar(x=list(live), y=list(live.values()), text=[f"{v:,.0f}" for v in live.values()],
                           textposition="outside"))
    # a linear axis: the live variants lie within a decade, where a log axis labels every minor tick
    # and the labels pile up
    fig.update_layout(title=title, yaxis={"title": "output tokens / s", "tickformat": ",.0f", "nticks": 6,
                                          "rangemode": "tozero"},
                      height=380, margin={"t": 50, "b": 80})
    return fig
