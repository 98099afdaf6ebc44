"""Figures of notebook 01 §7 (weight-only decode), from a `course-kit bench woq` record."""
from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..dtypes import woq_roofline as R

COLOURS = {"bf16": "#1f77b4", "int8": "#ff7f0e", "int4": "#2ca02c"}
FORMATS = ("bf16", "int8", "int4")


def decode_figure(results: list[dict]) -> go.Figure:
    """Batch-1 tokens/s of each format, one panel per model; each bar labelled with its speed over
    bf16 and its share of the copy bandwidth."""
    runners = {(r["model"], r["format"]): r for r in results if r.get("kind") == "runner" and r.get("tokens_per_s")}
    models = list(dict.fromkeys(m for m, _ in runners))
    fig = make_subplots(rows=1, cols=max(1, len(models)), subplot_titles=[f"{m}, batch 1" for m in models])
    for i, model in enumerate(models, start=1):
        base = runners.get((model, "bf16"))
        for fmt in FORMATS:
            r = runners.get((model, fmt))
            if r is None:
                continue
            label = f"{r['fraction_of_copy']:.0%} of copy"
            if base is not None and fmt != "bf16":
                label = f"{r['tokens_per_s'] / base['tokens_per_s']:.2f}x bf16<br>" + label
            fig.add_bar(x=[fmt], y=[r["tokens_per_s"]], name=fmt, marker_color=COLOURS[fmt], text=[label],
                        textposition="outside", showlegend=i == 1, legendgroup=fmt, row=1, col=i,
                        hovertemplate=f"{model} {fmt}: %{{y:,.0f}} tokens/s, {r['bytes_per_token'] / 1e9:.2f} GB "
                                      f"per token<extra></extra>")
        fig.update_yaxes(title_text="tokens/s" if i == 1 else None, row=1, col=i)
    fig.update_layout(title="Decode at batch 1: the step reads fewer bytes per token", height=420,
                      margin=dict(t=80), uniformtext_minsize=9)
    return fig


def crossing_figure(record: dict, shape: str, chosen: dict | None = None, ms: list[int] | None = None) -> go.Figure:
    """Time of one product against the batch M, log-log: the roofline's prediction of each format
    (lines, from the record's ceilings), torch's peers (markers), the course's fused kernels at M = 1
    (stars), and where each format turns compute-bound (dotted). `chosen`: a `woq_roofline.point`."""
    s = record["summary"]
    entry = (s.get("crossing") or {}).get(shape)
    if entry is None:
        raise ValueError(f"no product shape {shape!r} in this record; it has {sorted(s.get('crossing') or {})}")
    n, k, gs = entry["n"], entry["k"], record["params"].get("group_size", 128)
    ms = ms or [2 ** i for i in range(11)]
    fig = go.Figure()
    peers = [r for r in record["results"] if r.get("kind") == "peer" and r.get("shape") == shape and r.get("median_s")]
    for fmt in FORMATS:
        pred = R.curve(fmt, ms, n, k, s["copy_gbs"], s["matmul_tflops"], gs)
        fig.add_scatter(x=ms, y=[p["time_s"] * 1e6 for p in pred], mode="lines", name=f"{fmt}: roofline",
                        legendgroup=fmt, line=dict(color=COLOURS[fmt]))
        mine = sorted((r for r in peers if r["format"] == fmt), key=lambda r: r["m"])
        if mine:
            fig.add_scatter(x=[r["m"] for r in mine], y=[r["median_s"] * 1e6 for r in mine], mode="markers+lines",
                            name=f"{fmt}: {mine[0]['kernel']}", legendgroup=fmt,
                            line=dict(color=COLOURS[fmt], dash="dash", width=1), marker=dict(size=8))
        own = R.course_kernel_row(record["results"], shape, fmt)
        if own is not None:
            fig.add_scatter(x=[1], y=[own["median_s"] * 1e6], mode="markers", name=f"{fmt}: course kernel",
                            legendgroup=fmt, marker=dict(symbol="star", size=14, color=COLOURS[fmt]))
        turn = entry["predicted"][fmt]["compute_bound_from"]      # None: never (stored inf)
        if turn is not None and ms[0] <= turn < ms[-1]:
            fig.add_vline(x=turn, line=dict(color=COLOURS[fmt], dash="dot", width=1))
    fig.add_scatter(x=[None], y=[None], mode="lines", line=dict(color="grey", dash="dot", width=1),
                    name="dotted: compute-bound from here")
    if chosen is not None:
        fig.add_scatter(x=[chosen["m"]], y=[chosen["predicted_s"] * 1e6], mode="markers", name="your choice",
                        marker=dict(symbol="circle-open", size=18, color="black", line=dict(width=3)))
    fig.update_xaxes(type="log", title="batch M (rows of x)")
    fig.update_yaxes(type="log", title="time per product (µs)")
    fig.update_layout(title=f"{shape} ({n:,} x {k:,}): where weight-only quantisation stops paying", height=460)
    return fig
