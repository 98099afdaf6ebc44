"""Figures of notebook 02 (AMP): loss curves, loss-scale history, gradient magnitudes, speed/memory.

Each takes runs as `course_kit.amp.RunResult`s or as the row dicts of a recorded `amp` bench record.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

_COLORS = {"fp32": "#636efa", "tf32": "#00cc96", "bf16": "#ef553b", "fp16_scaler": "#ab63fa",
           "fp16_noscale": "#ffa15a"}


def _rows(runs: Mapping[str, Any] | Sequence[Any]) -> list[dict]:
    items = runs.values() if isinstance(runs, Mapping) else runs
    out = []
    for r in items:
        d = r.to_dict() if hasattr(r, "to_dict") else dict(r)
        d["name"] = d.get("precision") or d.get("name")
        out.append(d)
    return out


def loss_curves(runs: Mapping[str, Any] | Sequence[Any], title: str = "Training loss per precision mode") -> go.Figure:
    fig = go.Figure()
    for d in _rows(runs):
        if d.get("losses"):
            fig.add_scatter(y=d["losses"], name=d["name"], mode="lines", line=dict(color=_COLORS.get(d["name"])))
    fig.update_layout(title=title, xaxis_title="step", yaxis_title="cross-entropy loss", height=380)
    return fig


def scale_history(runs: Mapping[str, Any] | Sequence[Any], title: str = "Loss scale per step") -> go.Figure:
    """The scale (log axis) with the skipped steps marked: each skip halves it, growth doubles it."""
    fig = go.Figure()
    for d in _rows(runs):
        scales, skipped = d.get("scales") or [], d.get("skipped") or []
        fig.add_scatter(y=scales, name=f"{d['name']}: scale", mode="lines+markers", line_shape="hv")
        xs = [i for i, s in enumerate(skipped) if s]
        if xs:
            fig.add_scatter(x=xs, y=[scales[i] for i in xs], mode="markers", name=f"{d['name']}: skipped step",
                            marker=dict(symbol="x", size=10, color="red"))
    fig.update_layout(title=title, xaxis_title="step", yaxis_title="loss scale S", yaxis_type="log", height=380)
    return fig


def grad_histogram(hist: Mapping[str, Any], scale: float = 1.0, title: str | None = None) -> go.Figure:
    """Gradient magnitudes per power of two (from `amp.log2_histogram`), against fp16's smallest
    subnormal and smallest normal. With `scale`, also the same gradients multiplied by S."""
    import math
    lo = hist["log2_lo"]
    fig = go.Figure()
    fig.add_bar(x=lo, y=hist["counts"], name="true gradients", opacity=0.75)
    if scale != 1.0:
        shift = int(round(math.log2(scale)))
        fig.add_bar(x=[e + shift for e in lo], y=hist["counts"], name=f"× scale 2^{shift}", opacity=0.5)
    for x, label, color in ((hist["min_subnormal_log2"], "fp16 smallest subnormal 2^-24", "red"),
                            (hist["min_normal_log2"], "fp16 smallest normal 2^-14", "orange"),
                            (16, "fp16 max ≈ 2^16", "black")):
        fig.add_vline(x=x, line_dash="dash", line_color=color, annotation_text=label, annotation_textangle=-90)
    fig.update_layout(title=title or "Where the gradients sit against fp16's range",
                      xaxis_title="log2 |gradient|", yaxis_title="count", barmode="overlay", height=400)
    return fig


def time_and_memory(runs: Mapping[str, Any] | Sequence[Any], warmup: int = 3,
                    title: str = "Step time and memory per precision mode") -> go.Figure:
    """Median step time, and memory: peak GPU memory where measured, else the bytes saved for backward."""
    rows = [d for d in _rows(runs) if d.get("times_s") or d.get("median_step_s")]
    names = [d["name"] for d in rows]
    med = []
    for d in rows:
        if d.get("median_step_s") is not None:
            med.append(d["median_step_s"])
        else:
            t = sorted(d["times_s"][warmup:] or d["times_s"])
            med.append(t[len(t) // 2])
    peak = [d.get("peak_mem_bytes") or (d.get("peak_mem_gib") or 0) * 2**30 for d in rows]
    saved = [d.get("saved_bytes") or (d.get("saved_activation_gib") or 0) * 2**30 for d in rows]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("median step time (ms)", "memory (MiB)"))
    fig.add_bar(x=names, y=[m * 1e3 for m in med], marker_color=[_COLORS.get(n) for n in names],
                showlegend=False, row=1, col=1)
    if any(peak):
        fig.add_bar(x=names, y=[p / 2**20 for p in peak], name="peak GPU memory", row=1, col=2)
    fig.add_bar(x=names, y=[s / 2**20 for s in saved], name="saved for backward (one step)", row=1, col=2)
    fig.update_layout(title=title, height=380, barmode="group")
    return fig
