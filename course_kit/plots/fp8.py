"""Figures of notebook 02's fp8 section: loss curves against bf16, the scales over training, where
the time goes. Each takes live results (`amp.fp8_train`) or the rows of a `fp8_train` record."""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

COLORS = {"bf16": "#ef553b", "fp8": "#636efa", "fp8_delayed": "#00cc96", "fp8_noscale": "#ab63fa"}
ROLE_NAMES = {"input": "inputs (e4m3)", "weight": "weights (e4m3)", "grad_output": "output gradients (e5m2)"}


def _losses(runs: Mapping[str, Any] | Sequence[Mapping]) -> dict[str, list[float]]:
    if isinstance(runs, Mapping):
        return {k: list(getattr(v, "losses", None) or v["losses"]) for k, v in runs.items()}
    return {r["name"]: list(r["losses"]) for r in runs if r.get("losses")}


def loss_curves(runs: Mapping[str, Any] | Sequence[Mapping], title: str = "Training loss: fp8 against bf16") -> go.Figure:
    """Left: each run's loss per step. Right: each fp8 run's loss minus bf16's, step by step."""
    losses = _losses(runs)
    fig = make_subplots(rows=1, cols=2, subplot_titles=("loss per step", "loss minus bf16's"))
    for name, ys in losses.items():
        fig.add_scatter(y=ys, name=name, mode="lines", line=dict(color=COLORS.get(name)), row=1, col=1)
    base = losses.get("bf16")
    if base:
        for name, ys in losses.items():
            if name != "bf16":
                fig.add_scatter(y=[a - b for a, b in zip(ys, base)], name=f"{name} - bf16", mode="lines",
                                line=dict(color=COLORS.get(name), dash="dot"), row=1, col=2, showlegend=False)
    fig.update_xaxes(title_text="step")
    fig.update_yaxes(title_text="cross-entropy loss", row=1, col=1)
    fig.update_layout(title=title, height=360)
    return fig


def scales_over_training(summary: Mapping, title: str = "Per-tensor scales over training (all fp8 layers)") -> go.Figure:
    """One panel per role: log2 of the scale, smallest to largest over the layers (band) and median."""
    roles = summary.get("roles") or {}
    fig = make_subplots(rows=1, cols=max(len(roles), 1), shared_yaxes=False,
                        subplot_titles=[ROLE_NAMES.get(r, r) for r in roles] or [""])
    for i, (role, d) in enumerate(roles.items(), start=1):
        steps = list(range(len(d["scale_median"])))
        lo = [math.log2(v) for v in d["scale_min"]]
        hi = [math.log2(v) for v in d["scale_max"]]
        fig.add_scatter(x=steps + steps[::-1], y=hi + lo[::-1], fill="toself", mode="lines", line=dict(width=0),
                        fillcolor="rgba(99,110,250,0.2)", name="smallest to largest layer", showlegend=i == 1,
                        row=1, col=i)
        fig.add_scatter(x=steps, y=[math.log2(v) for v in d["scale_median"]], mode="lines", name="median layer",
                        line=dict(color="#636efa"), showlegend=i == 1, row=1, col=i)
    fig.update_xaxes(title_text="step")
    fig.update_yaxes(title_text="log2(scale)", row=1, col=1)
    fig.update_layout(title=title, height=340)
    return fig


def time_and_memory(rows: Sequence[Mapping], title: str = "Step time and memory") -> go.Figure:
    """Median step time and bytes (peak GPU memory of a step where measured, else bytes saved for backward)."""
    names = [r["name"] for r in rows]
    peak = [r.get("peak_mem_gib") for r in rows]
    use_peak = all(p is not None for p in peak)
    mem = peak if use_peak else [r.get("saved_gib", 0.0) * 1024 for r in rows]
    fig = make_subplots(rows=1, cols=2, subplot_titles=(
        "median step time (ms)", "peak memory of a step (GiB)" if use_peak else "saved for backward (MiB)"))
    colors = [COLORS.get(n) for n in names]
    fig.add_bar(x=names, y=[r["median_step_s"] * 1e3 for r in rows], marker_color=colors, showlegend=False, row=1, col=1)
    fig.add_bar(x=names, y=mem, marker_color=colors, showlegend=False, row=1, col=2)
    fig.update_layout(title=title, height=320)
    return fig


def layer_times(rows: Sequence[Mapping], title: str = "One linear of each shape: bf16 against fp8") -> go.Figure:
    """Per shape, the matmul alone and the whole linear (forward + backward), bf16 and fp8 (µs)."""
    names = [r["name"] for r in rows]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("the matmul alone (µs)", "linear forward + backward (µs)"))
    for key, col in (("matmul", 1), ("linear", 2)):
        for fmt, color in (("bf16", COLORS["bf16"]), ("fp8", COLORS["fp8"])):
            fig.add_bar(x=names, y=[r[f"{key}_{fmt}_s"] * 1e6 for r in rows], name=fmt, marker_color=color,
                        showlegend=col == 1, row=1, col=col)
    fig.update_layout(title=title, barmode="group", height=320)
    return fig
