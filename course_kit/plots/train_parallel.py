"""Figures of notebook 09's training section: FSDP2's bytes per rank against ZeRO-3 and plain DP,
recomputation's memory and time, gradient accumulation's cost per number of micro-batches."""
from __future__ import annotations

from typing import Mapping, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

MIB = 2**20
PART_COLORS = {"weights": "#636efa", "gradients": "#ef553b", "optimizer state": "#00cc96"}


def fsdp_bytes(result: Mapping, title: str = "Training state held by one rank") -> go.Figure:
    """Stacked bars: plain DP, FSDP2 as measured (local shards) and ZeRO-3's arithmetic."""
    cols = {"plain DP": result["held_dp"], "FSDP2 (measured)": result["held_fsdp"], "ZeRO-3 (formula)": result["zero3"]}
    fig = go.Figure()
    for part, color in PART_COLORS.items():
        fig.add_bar(x=list(cols), y=[d[part] / MIB for d in cols.values()], name=part, marker_color=color)
    fig.update_layout(title=f"{title} ({result['world_size']} ranks)", barmode="stack", yaxis_title="MiB", height=340)
    return fig


def recompute(plain: Mapping, recomputed: Mapping, title: str = "Activation recomputation: memory and time") -> go.Figure:
    """Peak memory measured and the blocks' activations by the formula; step time."""
    names = ["without", "with a checkpoint per block"]
    rows = [plain, recomputed]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("memory (MiB)", "step time (ms)"))
    fig.add_bar(x=names, y=[r["peak_bytes"] / MIB for r in rows], name="step's peak, measured", marker_color="#636efa",
                row=1, col=1)
    fig.add_bar(x=names, y=[r["formula_blocks_bytes"] / MIB for r in rows], name="blocks' activations, formula",
                marker_color="#bbbbbb", row=1, col=1)
    fig.add_bar(x=names, y=[r["step_s"] * 1e3 for r in rows], name="step time", marker_color="#ef553b",
                showlegend=False, row=1, col=2)
    fig.update_layout(title=title, barmode="group", height=340)
    return fig


def accumulation(rows: Sequence[Mapping], title: str = "Gradient accumulation: one batch in k micro-batches") -> go.Figure:
    """Peak memory and step time against k (the same batch, the same update)."""
    ks = [str(r["micro"]) for r in rows]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("peak memory of a step (MiB)", "step time (ms)"))
    fig.add_bar(x=ks, y=[r["peak_bytes"] / MIB for r in rows], marker_color="#636efa", showlegend=False, row=1, col=1)
    fig.add_bar(x=ks, y=[r["step_s"] * 1e3 for r in rows], marker_color="#ef553b", showlegend=False, row=1, col=2)
    fig.update_xaxes(title_text="micro-batches k")
    fig.update_layout(title=title, height=320)
    return fig
