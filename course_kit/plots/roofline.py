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
        ridge = tflops * 1e3 / bandwidth_gbs
        colour = COLOURS[i % len(COLOURS)]
        # The ridge is named in the legend and marked by a dot at the knee: ridges of dtypes with close
        # ceilings sit close together, and text labels there overlapped (issue 22).
        fig.add_scatter(x=intensity, y=attainable, mode="lines", legendgroup=name,
                        name=f"{name} (measured), ridge {ridge:,.3g} FLOP/B", line=dict(color=colour))
        fig.add_scatter(x=[ridge], y=[tflops], mode="markers", legendgroup=name, showlegend=False,
                        name=f"{name} ridge", marker=dict(size=9, color=colour, symbol="circle-open", line=dict(width=2)),
                        hovertemplate=f"{name} ridge: {ridge:,.3g} FLOP/B, {tflops:,.3g} TFLOP/s<extra></extra>")
    if spec:
        hbm = spec.get("hbm_gbs")
        for i, (name, tflops) in enumerate(sorted((k, v) for k, v in spec.items() if k != "hbm_gbs" and v)):
            if hbm and name in ceilings_tflops:
                # one legend entry for all datasheet roofs: they are the dotted grey lines
                first = not any(getattr(t, "legendgroup", None) == "spec" for t in fig.data)
                fig.add_scatter(x=intensity, y=np.minimum(tflops, intensity * hbm / 1e3), mode="lines",
                                name="datasheet roofs (dotted)" if first else f"{name} (spec)", legendgroup="spec",
                                showlegend=first, line=dict(dash="dot", color="grey"),
                                hovertemplate=f"{name} datasheet roof<extra></extra>")
    for p in points:
        fig.add_scatter(x=[p["intensity"]], y=[p["tflops"]], mode="markers+text", text=[p["name"]],
                        textposition="top center", name=p["name"], marker=dict(size=10, symbol="diamond"))
    fig.update_layout(title=title, xaxis_title="arithmetic intensity (FLOP / byte)",
                      yaxis_title="TFLOP/s", xaxis_type="log", yaxis_type="log", height=450,
                      legend=dict(orientation="v", font=dict(size=11)))
    return fig


def roofline_from_record(record: dict, points: list[dict] = (), title: str | None = None) -> go.Figure:
    """The roofline of a `roofline` record (yours or the reference), with optional kernels on it."""
    summary = record["summary"]
    gpu = (record.get("environment") or {}).get("gpu") or "CPU"
    return roofline_figure(summary["copy_gbs"], summary["matmul_tflops"], points,
                           title=title or f"Roofline of {gpu}", spec=summary.get("spec"))


def explorer_figure(cost: dict, machines: dict[str, tuple[float, dict[str, float], dict]],
                    title: str | None = None) -> go.Figure:
    """Notebook 00's roofline explorer: each machine's roofline for the ceiling used (solid), its
    ridge (open dot), and the op at its arithmetic intensity on each roof (diamond), with a dotted
    vertical line at the intensity.

    machines: {name: (bandwidth GB/s, ceilings TFLOP/s by dtype, `roofline.place(...)` result)}."""
    lo = min(1e-2, cost["intensity"] / 10)
    hi = max(1e4, cost["intensity"] * 10)
    intensity = np.logspace(np.log10(lo), np.log10(hi), 200)
    fig = go.Figure()
    tops = []
    for i, (name, (bw, ceilings, p)) in enumerate(machines.items()):
        colour = COLOURS[i % len(COLOURS)]
        peak = ceilings[p["ceiling_dtype"]]
        fig.add_scatter(x=intensity, y=np.minimum(peak, intensity * bw / 1e3), mode="lines",
                        name=f"{name}: {p['ceiling_dtype']} roof, ridge {p['ridge']:,.3g} FLOP/B",
                        line=dict(color=colour))
        fig.add_scatter(x=[p["ridge"]], y=[peak], mode="markers", showlegend=False, name=f"{name} ridge",
                        marker=dict(size=9, color=colour, symbol="circle-open", line=dict(width=2)))
        fig.add_scatter(x=[cost["intensity"]], y=[p["attainable_tflops"]], mode="markers",
                        name=f"{name}: at most {p['attainable_tflops']:,.3g} TFLOP/s ({p['bound']}-bound)",
                        marker=dict(size=13, symbol="diamond", color=colour, line=dict(width=1, color="black")))
        tops.append(peak)
    fig.add_vline(x=cost["intensity"], line_dash="dot", line_color="grey")
    fig.update_layout(title=title or f"{cost['op']}, n = {cost['n']:,}, {cost['dtype']}: "
                                     f"{cost['intensity']:,.3g} FLOP/B",
                      xaxis_title="arithmetic intensity (FLOP / byte)", yaxis_title="TFLOP/s",
                      xaxis_type="log", yaxis_type="log", height=430,
                      legend=dict(orientation="h", y=-0.25, font=dict(size=11)), margin=dict(b=120))
    return fig
