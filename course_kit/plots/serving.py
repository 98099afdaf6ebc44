"""Figures for notebook 06's serving section: latency against load (`course-kit bench serving`)."""
from __future__ import annotations

import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from course_kit.batching.loadgen import sweep_rows
from course_kit.plots.batching import log_ticks


def latency_vs_load(record: dict, title: str | None = None) -> go.Figure:
    """TTFT and TPOT (p50 solid, p99 dashed) against the request rate, one colour per server; the
    TTFT threshold as a line and each server's knee (where p99 TTFT crosses it) as a star, each
    server's saturation capacity as a dotted vertical line."""
    rows = sweep_rows(record)
    summary = record.get("summary", {})
    servers = summary.get("servers", {})
    threshold = summary.get("threshold_s", 1.0)
    fig = make_subplots(rows=1, cols=2, subplot_titles=(f"time to first token (grey dots: {threshold:g} s)",
                                                        "time per output token"),
                        horizontal_spacing=0.1)
    colors = qualitative.Plotly
    for i, (name, sel) in enumerate(rows.items()):
        color = colors[i % len(colors)]
        x = [r["rate_rps"] for r in sel]
        for col, metric in ((1, "ttft"), (2, "tpot")):
            for q, dash in (("p50", "solid"), ("p99", "dash")):
                fig.add_trace(go.Scatter(
                    x=x, y=[r[f"{metric}_{q}_s"] for r in sel], mode="lines+markers", name=f"{name} {q}",
                    legendgroup=f"{name} {q}", showlegend=(col == 1), line=dict(color=color, dash=dash),
                    hovertemplate=f"{name}<br>%{{x:.3g}} req/s<br>{metric.upper()} {q} %{{y:.3g}} s<extra></extra>"),
                    row=1, col=col)
        info = servers.get(name, {})
        if info.get("knee_rps") is not None:
            fig.add_trace(go.Scatter(x=[info["knee_rps"]], y=[threshold], mode="markers",
                                     marker=dict(symbol="star", size=16, color=color, line=dict(width=1)),
                                     name=f"{name}: knee {info['knee_rps']:.3g} req/s", legendgroup=f"{name} knee",
                                     hovertemplate="p99 TTFT crosses %{y:g} s at %{x:.3g} req/s<extra></extra>"),
                          row=1, col=1)
        if info.get("capacity_rps"):
            for col in (1, 2):
                fig.add_vline(x=info["capacity_rps"], line=dict(color=color, dash="dot", width=1), row=1, col=col)
    # named in the panel's title: an hline's annotation lands off the line on a log axis
    fig.add_hline(y=threshold, line=dict(color="gray", dash="dot"), row=1, col=1)
    every = [r for sel in rows.values() for r in sel]
    fig.update_xaxes(title_text="request rate (requests/s, Poisson)", type="log",
                     **log_ticks([r["rate_rps"] for r in every]))
    for col, metric in ((1, "ttft"), (2, "tpot")):
        fig.update_yaxes(title_text="seconds", type="log", row=1, col=col,
                         **log_ticks([r.get(f"{metric}_{q}_s") for r in every for q in ("p50", "p99")]
                                     + ([threshold] if col == 1 else [])))
    gpu = record.get("environment", {}).get("gpu") or "this machine"
    fig.update_layout(title=title or f"Latency against load on {gpu} (dotted: each server's saturation capacity)",
                      height=480, legend=dict(groupclick="toggleitem", orientation="h", yanchor="top", y=-0.22),
                      margin=dict(r=10))
    return fig
