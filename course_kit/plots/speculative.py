"""Figures of the speculative-decoding lesson (notebook 10), from `course-kit bench speculative`
records or a live run: speed-up against k (measured and predicted), acceptance per draft position,
the target's pass against the tokens it carries, and the predicted speed-up against the batch."""
from __future__ import annotations

from typing import Mapping, Sequence

import plotly.graph_objects as go

__all__ = ["speedup_figure", "acceptance_figure", "verify_cost_figure", "batch_figure", "spec_rows"]

BLUE, ORANGE, GREY = "#1f77b4", "#ff7f0e", "#7f7f7f"


def spec_rows(record: Mapping, draft: str = "trained") -> list[dict]:
    """The record's speculative rows for one draft, by k."""
    rows = [r for r in record.get("results", []) if r.get("variant") == "speculative"
            and r.get("draft", "trained") == draft]
    return sorted(rows, key=lambda r: r["k"])


def speedup_figure(rows: Sequence[Mapping], *, title: str, selected_k: int | None = None) -> go.Figure:
    """Measured speed-up over the main model alone per k (bars) beside Leviathan et al.'s prediction (markers)."""
    ks = [r["k"] for r in rows]
    colors = [ORANGE if k == selected_k else BLUE for k in ks]
    fig = go.Figure(go.Bar(x=ks, y=[r["speedup"] for r in rows], name="measured", marker_color=colors,
                           text=[f"{r['speedup']:.2f}x" for r in rows], textposition="outside"))
    pred = [(r["k"], r.get("predicted_speedup")) for r in rows if r.get("predicted_speedup") is not None]
    if pred:
        fig.add_trace(go.Scatter(x=[k for k, _ in pred], y=[p for _, p in pred], mode="markers+lines",
                                 name="predicted from alpha and c", marker={"symbol": "diamond", "size": 10},
                                 line={"dash": "dot", "color": GREY}))
    fig.add_hline(y=1.0, line_dash="dash", line_color=GREY, annotation_text="the main model alone",
                  annotation_position="bottom right")
    fig.update_layout(title=title, xaxis={"title": "draft tokens per round (k)", "dtick": 1},
                      yaxis={"title": "speed-up over the main model alone", "rangemode": "tozero"},
                      height=400, legend={"orientation": "h", "y": -0.2}, margin={"t": 60})
    return fig


def acceptance_figure(acceptance: Sequence[float | None], *, title: str, alpha: float | None = None) -> go.Figure:
    """How often draft position i was kept when it was reached (positions 1..k)."""
    xs = list(range(1, len(acceptance) + 1))
    ys = [a if a is not None else 0.0 for a in acceptance]
    fig = go.Figure(go.Bar(x=xs, y=ys, marker_color=BLUE, text=[f"{y:.0%}" for y in ys], textposition="outside",
                           name="kept when reached"))
    if alpha is not None:
        fig.add_hline(y=alpha, line_dash="dot", line_color=ORANGE, annotation_text=f"alpha = {alpha:.2f}")
    fig.update_layout(title=title, xaxis={"title": "draft position", "dtick": 1},
                      yaxis={"title": "fraction kept", "range": [0, 1.1], "tickformat": ".0%"}, height=360,
                      showlegend=False, margin={"t": 60})
    return fig


def verify_cost_figure(costs: Mapping, *, title: str) -> go.Figure:
    """The target's pass over M tokens (ms) against M, with M plain steps and one draft step for scale."""
    ms = sorted(int(m) for m in costs["target_ms"])
    table = {int(m): v for m, v in costs["target_ms"].items()}
    one = table[ms[0]]
    fig = go.Figure(go.Scatter(x=ms, y=[table[m] for m in ms], mode="lines+markers", name="one pass over M tokens",
                               line={"color": BLUE}))
    fig.add_trace(go.Scatter(x=ms, y=[one * m / ms[0] for m in ms], mode="lines", name="M separate steps",
                             line={"color": GREY, "dash": "dash"}))
    if costs.get("draft_ms") is not None:
        fig.add_trace(go.Scatter(x=ms, y=[costs["draft_ms"]] * len(ms), mode="lines", name="one draft step",
                                 line={"color": ORANGE, "dash": "dot"}))
    fig.update_layout(title=title, xaxis={"title": "tokens in the pass (M)", "dtick": 1},
                      yaxis={"title": "ms", "rangemode": "tozero"}, height=380,
                      legend={"orientation": "h", "y": -0.2}, margin={"t": 60})
    return fig


def batch_figure(points: Sequence[Mapping], *, title: str) -> go.Figure:
    """Predicted speed-up of speculation against the batch (log axis), and what the verify pass costs."""
    bs = [p["batch"] for p in points]
    fig = go.Figure(go.Scatter(x=bs, y=[p["speedup"] for p in points], mode="lines+markers",
                               name="predicted speed-up", line={"color": BLUE}))
    fig.add_trace(go.Scatter(x=bs, y=[p["verify_over_step"] for p in points], mode="lines", yaxis="y2",
                             name="verify pass / plain step", line={"color": ORANGE, "dash": "dot"}))
    fig.add_hline(y=1.0, line_dash="dash", line_color=GREY)
    fig.update_layout(title=title, xaxis={"title": "batch (sequences)", "type": "log"},
                      yaxis={"title": "speed-up over the main model alone", "rangemode": "tozero"},
                      yaxis2={"title": "verify pass, in plain steps", "overlaying": "y", "side": "right",
                              "rangemode": "tozero"},
                      height=400, legend={"orientation": "h", "y": -0.25}, margin={"t": 60})
    return fig
