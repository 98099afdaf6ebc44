"""The roofline figure that notebooks place their kernels on."""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]


def roofline_figure(bandwidth_gbs: float, ceilings_tflops: dict[str, float], points: list[dict] = (),
                    title: str = "Roofline", spec: dict | None = None) -> go.Figure:
    """Attainable TFLOP/s = min(ceiling, intensity x bandwidth), on log axes.

    points: dicts with name, intensity (FLOP/byte) and tflops, drawn as markers.
    spec: optional {"hbm_gbs": ..., "bf16": ...} drawn dotted, for the datasheet's promise.
    """
    if bandwidth_gbs <= 0:
        raise ValueError(f"bandwidth_gbs must be positive, got {bandwidth_gbs}")
    intensity = np.logspace(-2, 4, 200)
    fig = go.Figure()
    for i, (name, tflops) in enumerate(sorted(ceilings_tflops.items(), key=lambda kv: kv[1])):
        attainable = np.minimum(tflops, intensity * bandwidth_gbs / 1e3)
        fig.add_scatter(x=intensity, y=attainable, mode="lines", name=f"{name} (measured)",
                        line=dict(color=COLOURS[i % len(COLOURS)]))
        ridge = tflops * 1e3 / bandwidth_gbs
        fig.add_annotation(x=np.log10(ridge), y=np.log10(tflops), text=f"ridge {ridge:.0f} FLOP/B",
                           showarrow=False, yshift=10, font=dict(size=10))
    if spec:
        hbm = spec.get("hbm_gbs")
        for i, (name, tflops) in enumerate(sorted((k, v) for k, v in spec.items() if k != "hbm_gbs" and v)):
            if hbm and name in ceilings_tflops:
                fig.add_scatter(x=intensity, y=np.minimum(tflops, intensity * hbm / 1e3), mode="lines",
                                name=f"{name} (spec)", line=dict(dash="dot", color="grey"))
    for p in points:
        fig.add_scatter(x=[p["intensity"]], y=[p["tflops"]], mode="markers+text", text=[p["name"]],
                        textposition="top center", name=p["name"], marker=dict(size=10, symbol="diamond"))
    fig.update_layout(title=title, xaxis_title="arithmetic intensity (FLOP / byte)",
                      yaxis_title="TFLOP/s", xaxis_type="log", yaxis_type="log", height=450,
                      legend=dict(orientation="v"))
    return fig


def roofline_from_record(record: dict, points: list[dict] = (), title: str | None = None) -> go.Figure:
    """The roofline of a `roofline` record (yours or the reference), with optional kernels on it."""
    summary = record["summary"]
    gpu = (record.get("environment") or {}).get("gpu") or "CPU"
    return roofline_figure(summary["copy_gbs"], summary["matmul_tflops"], points,
                           title=title or f"Roofline of {gpu}", spec=summary.get("spec"))
