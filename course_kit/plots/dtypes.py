"""Figures for notebook 01: format ranges, bit fields, operation errors, matmul throughput."""
from __future__ import annotations

import math
from typing import Iterable, Optional, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..dtypes import FORMAT_NAMES, Rounding, get_format
from ..dtypes import ops as dops

__all__ = ["FIELD_COLORS", "range_figure", "explorer_figure", "ops_figure", "throughput_figure"]

FIELD_COLORS = {"sign": "#d62728", "exponent": "#1f77b4", "mantissa": "#2ca02c",
                "integer": "#9467bd"}
_OUTCOME_COLORS = {"exact": "#2ca02c", "rounded": "#17becf", "underflow to subnormal": "#bcbd22",
                   "flushed to zero": "#7f7f7f", "saturated": "#ff7f0e",
                   "overflow to inf": "#d62728", "NaN": "#8c564b"}


def _add_ranges(fig: go.Figure, formats: Sequence[str], row: Optional[int] = None) -> None:
    kw = {} if row is None else {"row": row, "col": 1}
    for name in formats:
        f = get_format(name)
        if f.kind == "int":
            spans = [("integers 1..max", 1.0, f.max, "#9467bd")]
        else:
            spans = [("subnormal", f.smallest_subnormal, f.smallest_normal, "#9ecae1"),
                     ("normal", f.smallest_normal, f.max, "#1f77b4")]
        for label, lo, hi, color in spans:
            fig.add_trace(go.Scatter(
                x=[lo, hi], y=[name, name], mode="lines", line={"width": 14, "color": color},
                name=f"{name} {label}", showlegend=False,
                hovertemplate=f"{name} {label}: %{{x:.3g}}<extra></extra>"), **kw)


def range_figure(value: Optional[float] = None,
                 formats: Sequence[str] = FORMAT_NAMES) -> go.Figure:
    """Each format's positive range on a log axis: subnormals (light blue), normals (blue),
    integers (purple)."""
    fig = go.Figure()
    _add_ranges(fig, formats)
    if value is not None and value != 0 and math.isfinite(value):
        fig.add_vline(x=abs(value), line={"color": "black", "dash": "dash"})
    fig.update_xaxes(type="log", title="magnitude", exponentformat="power")
    fig.update_layout(title="Range of each format", height=360,
                      yaxis={"autorange": "reversed"}, margin={"l": 90, "r": 20})
    return fig


def _bit_trace(r: Rounding) -> go.Scatter:
    """One square per bit, coloured by field, most significant bit on the left."""
    fmt = get_format(r.format)
    f = r.fields
    kinds = (["sign"] * len(f.sign) + ["exponent"] * len(f.exponent)
             + ["mantissa" if fmt.kind == "float" else "integer"] * len(f.mantissa))
    size = 26 if len(f.bits) <= 19 else 17
    return go.Scatter(
        x=list(range(len(f.bits))), y=[0] * len(f.bits), mode="markers+text",
        text=list(f.bits), textfont={"color": "white", "size": 13},
        marker={"symbol": "square", "size": size, "color": [FIELD_COLORS[k] for k in kinds]},
        customdata=kinds, hovertemplate="%{customdata} bit: %{text}<extra></extra>",
        showlegend=False, name=f"{r.format} bits")


def explorer_figure(x: float, results: Sequence[Rounding], selected: str) -> go.Figure:
    """Top: ranges with |x| and every format's stored value marked. Bottom: the selected bits."""
    names = [r.format for r in results]
    fig = make_subplots(rows=2, cols=1, row_heights=[0.72, 0.28], vertical_spacing=0.16,
                        subplot_titles=(f"x = {x:.4g}: where each format can store it",
                                        f"{selected} bit pattern (sign | exponent | mantissa)"))
    _add_ranges(fig, names, row=1)
    if x != 0 and math.isfinite(x):
        fig.add_trace(go.Scatter(x=[abs(x)] * 2, y=[names[0], names[-1]], mode="lines",
                                 line={"color": "black", "dash": "dash"}, name="|x|",
                                 showlegend=False, hovertemplate="|x| = %{x:.4g}<extra></extra>"),
                      row=1, col=1)
    shown = [(r, abs(r.stored)) for r in results
             if math.isfinite(r.stored) and r.stored != 0]
    fig.add_trace(go.Scatter(
        x=[v for _, v in shown], y=[r.format for r, _ in shown], mode="markers",
        marker={"size": 13, "symbol": "diamond", "line": {"color": "black", "width": 1},
                "color": [_OUTCOME_COLORS[r.outcome] for r, _ in shown]},
        text=[r.outcome for r, _ in shown], name="stored",
        hovertemplate="%{y}: stored %{x:.6g} (%{text})<extra></extra>", showlegend=False),
        row=1, col=1)
    sel = next(r for r in results if r.format == selected)
    fig.add_trace(_bit_trace(sel), row=2, col=1)
    fig.update_xaxes(type="log", exponentformat="power", range=[-46, 41], row=1, col=1)
    fig.update_yaxes(autorange="reversed", row=1, col=1)
    fig.update_xaxes(visible=False, range=[-1, 33], row=2, col=1)
    fig.update_yaxes(visible=False, row=2, col=1)
    fig.update_layout(height=520, margin={"l": 90, "r": 20, "t": 60, "b": 20},
                      uirevision="explorer")
    return fig


def ops_figure(op: str, x: float, n: int, formats: Sequence[str] = dops.OP_FORMATS) -> go.Figure:
    """Relative error of the operation in each format along its sweep; the current x marked.

    Overflow and NaN are drawn at the top (error 10) so they stay visible on the log axis;
    exact results at the bottom (1e-9).
    """
    fig = go.Figure()
    for fmt in formats:
        grid, errs = dops.curve(op, fmt, x=x, n=n)
        ys = [10.0 if not math.isfinite(e) else max(e, 1e-9) for e in errs]
        fig.add_trace(go.Scatter(x=grid, y=ys, mode="lines", name=fmt))
    marker_x = float(n) if op == "sum" else x
    fig.add_vline(x=marker_x, line={"color": "black", "dash": "dash"})
    fig.add_hrect(y0=3, y1=30, fillcolor="red", opacity=0.08, line_width=0,
                  annotation_text="overflow / NaN", annotation_position="top left")
    xtitle = "number of terms summed" if op == "sum" else "x"
    fig.update_xaxes(title=xtitle, type="log" if op in ("square", "sum") else "linear")
    fig.update_yaxes(title="relative error", type="log", range=[-9.2, 1.4])
    fig.update_layout(title=f"{dops.OPS[op]}: relative error per format", height=380,
                      margin={"l": 60, "r": 20})
    return fig


def throughput_figure(series: dict[str, Iterable[dict]],
                      peaks: Optional[dict[str, float]] = None) -> go.Figure:
    """Grouped bars of matmul TFLOP/s per dtype; series maps a label ("H200 reference",
    "this machine") to result rows {"dtype", "tflops"}; peaks (spec TFLOP/s) as markers."""
    fig = go.Figure()
    for label, rows in series.items():
        rows = [r for r in rows if r.get("tflops") is not None]
        fig.add_trace(go.Bar(x=[r["dtype"] for r in rows], y=[r["tflops"] for r in rows],
                             name=label, text=[f"{r['tflops']:.0f}" for r in rows],
                             textposition="outside"))
    if peaks:
        fig.add_trace(go.Scatter(x=list(peaks), y=list(peaks.values()), mode="markers",
                                 marker={"symbol": "line-ew-open", "size": 40,
                                         "line": {"width": 3}}, name="spec peak (dense)"))
    fig.update_layout(title="Matmul throughput by dtype", yaxis_title="TFLOP/s",
                      barmode="group", height=400)
    return fig
