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
    """One small panel per mode, on a shared loss axis: the mode's loss per step in its colour over
    strict fp32's in grey. Curves that coincide can no longer hide one another (issue 22), and each
    panel's title gives the mode's last loss."""
    rows = [d for d in _rows(runs) if d.get("losses")]
    base = next((d["losses"] for d in rows if d["name"] == "fp32"), None)
    titles = [f"{d['name']}: last {d['losses'][-1]:.3f}" for d in rows] or [""]
    fig = make_subplots(rows=1, cols=max(len(rows), 1), shared_yaxes=True, subplot_titles=titles,
                        horizontal_spacing=0.02)
    for i, d in enumerate(rows, start=1):
        if base is not None and d["name"] != "fp32":
            fig.add_scatter(y=base, name="fp32 (grey, for reference)", mode="lines", legendgroup="fp32-ref",
                            showlegend=i == 2, line=dict(color="#bbbbbb", width=3), row=1, col=i)
        fig.add_scatter(y=d["losses"], name=d["name"], mode="lines", row=1, col=i,
                        line=dict(color=_COLORS.get(d["name"]), width=2))
    fig.update_xaxes(title_text="step")
    fig.update_yaxes(title_text="cross-entropy loss", row=1, col=1)
    fig.update_annotations(font_size=11)
    fig.update_layout(title=title, height=360, legend=dict(orientation="h", y=-0.3), margin=dict(b=100))
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


def time_and_memory(runs: Mapping[str, Any] | Sequence[Any], warmup: int = 3,
                    title: str = "Step time and memory per precision mode",
                    peak_label: str = "peak GPU memory") -> go.Figure:
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
    # A live run's peak counts from what was already allocated (its data, earlier work): subtract it.
    peak = [(d["peak_mem_bytes"] - (d.get("base_mem_bytes") or 0)) if d.get("peak_mem_bytes")
            else (d.get("peak_mem_gib") or 0) * 2**30 for d in rows]
    saved = [d.get("saved_bytes") or (d.get("saved_activation_gib") or 0) * 2**30 for d in rows]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("median step time (ms)", "memory (GiB, 2^30 bytes)"))
    fig.add_bar(x=names, y=[m * 1e3 for m in med], marker_color=[_COLORS.get(n) for n in names],
                showlegend=False, row=1, col=1)
    if any(peak):
        fig.add_bar(x=names, y=[p / 2**30 for p in peak], name=peak_label, row=1, col=2)
    fig.add_bar(x=names, y=[s / 2**30 for s in saved], name="saved for backward (one step)", row=1, col=2)
    fig.update_layout(title=title, height=380, barmode="group")
    if max(peak + saved, default=0) < 2**30:      # small runs read better in MiB
        for tr in fig.data[1:]:
            tr.y = [v * 1024 for v in tr.y]
        fig.layout.annotations[1].text = "memory (MiB)"
    return fig


_ZONE_COLOURS = {"underflow": "rgba(214,39,40,0.12)", "subnormal": "rgba(255,127,14,0.12)",
                 "overflow": "rgba(148,103,189,0.15)"}


def loss_scale_figure(hist: Mapping[str, Any], view: Mapping[str, Any], title: str | None = None) -> go.Figure:
    """The activation-gradient histogram (from `amp.activations.log2_hist`) moved by the loss scale, over
    a format's zones (from `amp.activations.zones`): flushed to zero, subnormal, overflow."""
    shift = view["log2_scale"]
    xs = [e + shift for e in hist["log2_lo"]]
    e = view["edges"]
    lo, hi = min(xs + [e["subnormal"] - 4]), max(xs + [e["max"] + 4])
    fig = go.Figure()
    fig.add_vrect(x0=lo - 1, x1=e["subnormal"], fillcolor=_ZONE_COLOURS["underflow"], line_width=0, layer="below")
    fig.add_vrect(x0=e["subnormal"], x1=e["normal"], fillcolor=_ZONE_COLOURS["subnormal"], line_width=0, layer="below")
    fig.add_vrect(x0=e["max"], x1=hi + 1, fillcolor=_ZONE_COLOURS["overflow"], line_width=0, layer="below")
    fig.add_bar(x=[x + 0.5 for x in xs], y=hist["counts"], width=1.0, name="|gradient| x scale",
                marker_color="#1f77b4")
    for x, label in ((e["subnormal"], "smallest subnormal"), (e["normal"], "smallest normal"), (e["max"], "max")):
        fig.add_vline(x=x, line_dash="dash", line_color="grey")
    text = (f"{view['format']}, scale 2^{shift}: underflow {view['underflow']:.1%}, subnormal "
            f"{view['subnormal']:.1%}, normal {view['normal']:.1%}, overflow {view['overflow']:.1%}")
    fig.add_annotation(x=0.01, y=1.08, xref="paper", yref="paper", text=text, showarrow=False,
                       xanchor="left", font=dict(size=12))
    fig.update_layout(title=title or "Activation gradients against the format's range",
                      xaxis_title="log2 (|gradient| x scale)   (red: flushed to zero, orange: subnormal, "
                                  "purple: overflow)", yaxis_title="count", height=400, bargap=0,
                      margin=dict(t=80), showlegend=False, xaxis=dict(range=[lo - 1, hi + 1]))
    return fig


def scaler_steps_figure(scales: Mapping[str, Sequence[float]], events: Sequence[str],
                        title: str = "Loss scale after each step") -> go.Figure:
    """Both scalers' scale histories (log axis), with the steps whose gradient held inf/nan marked."""
    fig = go.Figure()
    styles = {"course": dict(color="#ef553b", width=4), "torch": dict(color="#111111", width=1.5, dash="dot")}
    names = {"course": "course DynamicLossScaler", "torch": "torch GradScaler"}
    for k, ys in scales.items():
        fig.add_scatter(x=list(range(len(ys))), y=list(ys), mode="lines+markers", line_shape="hv",
                        name=names.get(k, k), line=styles.get(k))
    bad = [i + 1 for i, ev in enumerate(events) if ev != "clean"]
    if bad:
        first = next(iter(scales.values()))
        fig.add_scatter(x=bad, y=[first[i] for i in bad], mode="markers", name="step with inf/nan (skipped)",
                        marker=dict(symbol="x", size=12, color="red"))
    fig.update_layout(title=title, xaxis_title="step", yaxis_title="scale", yaxis_type="log", height=360)
    return fig


def memory_breakdown(rows: Sequence[Mapping[str, Any]], title: str = "What holds a training step's peak memory") -> go.Figure:
    """One stacked bar per precision mode: its step's peak GPU memory by what holds it (GiB)."""
    from ..profiling.memory import CATEGORIES
    rows = [r for r in rows if (r.get("memory_breakdown") or {}).get("by_category")]
    fig = go.Figure()
    for i, cat in enumerate(CATEGORIES):
        ys = [r["memory_breakdown"]["by_category"].get(cat, 0) / 2**30 for r in rows]
        if any(ys):
            fig.add_bar(x=[r["name"] for r in rows], y=ys, name=cat,
                        hovertemplate=f"{cat}<br>%{{y:.2f}} GiB<extra>%{{x}}</extra>")
    fig.update_layout(barmode="stack", title=title, yaxis_title="GiB at the peak", height=420,
                      legend=dict(orientation="h", y=-0.2), margin=dict(l=10, r=10, t=60, b=40))
    return fig
