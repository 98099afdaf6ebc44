"""Figures of notebook 03 (torch.compile modes): first call vs steady state, kernels per mode,
recompiles. Rows are `ModeResult.as_dict()`s or the rows of a recorded `compile` bench record."""
from __future__ import annotations

from typing import Any, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots


def _rows(rows: Sequence[Any]) -> list[dict]:
    out = []
    for r in rows:
        d = r.as_dict() if hasattr(r, "as_dict") else dict(r)
        if d.get("steady_s") is not None:
            out.append(d)
    return out


def first_vs_steady(rows: Sequence[Any], title: str = "Time to first result vs steady state") -> go.Figure:
    """Per mode: the first call (compilation included) and one steady-state call, on a log axis."""
    rows = _rows(rows)
    names = [d.get("name", d["mode"]) for d in rows]
    fig = go.Figure()
    fig.add_bar(x=names, y=[d["first_call_s"] for d in rows], name="first call (compile + run)")
    fig.add_bar(x=names, y=[d["steady_s"] for d in rows], name="steady-state call (median)")
    fig.update_layout(title=title, yaxis_type="log", yaxis_title="seconds (log)", barmode="group", height=400)
    return fig


def speedups(rows: Sequence[Any], title: str = "Steady-state speed-up over eager") -> go.Figure:
    rows = [d for d in _rows(rows) if d.get("speedup_vs_eager")]
    fig = go.Figure(go.Bar(x=[d.get("name", d["mode"]) for d in rows], y=[d["speedup_vs_eager"] for d in rows],
                           text=[f"{d['speedup_vs_eager']:.2f}×" for d in rows], textposition="outside"))
    fig.add_hline(y=1.0, line_dash="dash")
    fig.update_layout(title=title, yaxis_title="× eager", height=380)
    return fig


def kernels_per_mode(rows: Sequence[Any], title: str = "GPU work launched per call (profiler)") -> go.Figure:
    """Host launch calls (one per kernel in eager, one per CUDA-graph replay) and GPU kernels per call."""
    rows = [d for d in _rows(rows) if d.get("gpu_kernels_per_call") is not None]
    names = [d.get("name", d["mode"]) for d in rows]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("host launch calls per call", "GPU kernels per call"))
    fig.add_bar(x=names, y=[d["launch_calls_per_call"] for d in rows], showlegend=False, row=1, col=1)
    fig.add_bar(x=names, y=[d["gpu_kernels_per_call"] for d in rows], showlegend=False, row=1, col=2)
    fig.update_layout(title=title, height=380)
    return fig


def recompiles(results: Sequence[dict], title: str = "Compilations as the input shape changes") -> go.Figure:
    """Bars of `count_compiles` results: how many graphs each dynamic-shape choice compiled."""
    fig = go.Figure(go.Bar(x=[r["dynamic"] for r in results], y=[r["compiles"] for r in results],
                           text=[str(r["compiled_on_call"]) for r in results], textposition="outside"))
    fig.update_layout(title=title, xaxis_title="dynamic-shape choice", yaxis_title="compilations", height=360)
    return fig


def breakeven_figure(eager: dict, row: dict, calls: int, break_even: float, title: str | None = None) -> go.Figure:
    """Total time of N calls (compile included) for eager and one compiled mode, on log axes; the
    break-even point (where the lines cross) and the chosen N are marked."""
    import math

    import numpy as np
    hi = max(10 * calls, 10 * break_even if math.isfinite(break_even) else 0, 100)
    ns = np.logspace(0, math.log10(hi), 120)
    comp = 0.0 if row["mode"] == "eager" else (row.get("compile_s") or 0.0)
    fig = go.Figure()
    fig.add_scatter(x=ns, y=ns * eager["steady_s"], mode="lines", name="eager", line=dict(color="#636efa"))
    fig.add_scatter(x=ns, y=comp + ns * row["steady_s"], mode="lines", name=f"{row['mode']} (compile included)",
                    line=dict(color="#ef553b"))
    if math.isfinite(break_even) and break_even >= 1:
        fig.add_scatter(x=[break_even], y=[break_even * eager["steady_s"]], mode="markers",
                        name=f"break-even: {break_even:,.0f} calls", marker=dict(size=12, symbol="star", color="black"))
    fig.add_vline(x=calls, line_dash="dot", line_color="grey")
    fig.update_layout(title=title or f"{row['mode']} against eager: total time of N calls",
                      xaxis_title="number of calls N", yaxis_title="total seconds (compile + N calls)",
                      xaxis_type="log", yaxis_type="log", height=400, legend=dict(orientation="h", y=-0.25),
                      margin=dict(b=110))
    return fig
