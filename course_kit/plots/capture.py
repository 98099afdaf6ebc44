"""Figures of notebook 04 (graph capture): the comparison table and the timing bars."""
from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

_COLOURS = {"correct": "#d1f0d6", "silently wrong": "#ffe8b0", "refused": "#f8d0d0", "fails at run": "#f8d0d0"}


def comparison_figure(rows: list[dict], methods: tuple[str, ...]):
    """The comparison as a coloured table (green correct, amber silently wrong, red refused or failed)
    whose long details wrap instead of being cut: a `notebook.Table`, HTML, as wide as the column."""
    from ..notebook import table
    header = ["case"] + list(methods)
    # the verdict in words (the colour says it too): an emoji mark is an empty box without an emoji font
    cells = [[f"<b>{r['case']}</b><br><i>{r['note']}</i>"] + [f"<b>{r[m].status}</b>: {r[m].detail}" for m in methods]
             for r in rows]
    fills = [["#f5f5f5"] + [_COLOURS[r[m].status] for m in methods] for r in rows]
    return table(header, cells, fills, widths=[2.2] + [2] * len(methods))


def timing_figure(rows: list[dict]) -> go.Figure:
    """Left: seconds to capture. Right: µs per call of the captured block, eager included."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("time to capture (s)", "one call (µs, median)"))
    captured = [r for r in rows if r["method"] != "eager"]
    fig.add_bar(x=[r["method"] for r in captured], y=[r["capture_s"] for r in captured], row=1, col=1,
                name="capture", text=[f"{r['capture_s']:.2f}" for r in captured])
    fig.add_bar(x=[r["method"] for r in rows], y=[r["call_us"] for r in rows], row=1, col=2, name="call",
                text=[f"{r['call_us']:.0f}" for r in rows])
    fig.update_layout(height=380, showlegend=False, margin=dict(t=40, b=10))
    return fig


def gallery_figure(cells: list[dict], traps: list[str], methods: tuple[str, ...],
                   selected: tuple[str, str] | None = None) -> go.Figure:
    """Notebook 04's capture gallery as a grid: one row per trap, one column per method, coloured by
    verdict; the selected cell is marked ▶ and the cells not tried yet are grey."""
    by = {(c["trap"], c["method"]): c for c in cells}
    columns, colours = [[f"<b>{t}</b>" for t in traps]], [["#f5f5f5"] * len(traps)]
    for m in methods:
        col, colour = [], []
        for t in traps:
            c = by.get((t, m))
            mark = "▶ " if selected == (t, m) else ""
            col.append(f"{mark}{c['status']}" if c else f"{mark}not tried yet")
            colour.append(_COLOURS[c["status"]] if c else "#eeeeee")
        columns.append(col)
        colours.append(colour)
    fig = go.Figure(go.Table(columnwidth=[2.2] + [1.6] * len(methods),
                             header=dict(values=["trap"] + list(methods), fill_color="#e0e0e0", align="left"),
                             cells=dict(values=columns, fill_color=colours, align="left", height=30)))
    fig.update_layout(height=90 + 34 * len(traps), margin=dict(t=10, b=10, l=10, r=10))
    return fig
