"""Stacked bar charts of memory: what takes the bytes, per configuration."""
from __future__ import annotations

from typing import Mapping, Optional

import plotly.graph_objects as go

from ..memory import GB

__all__ = ["breakdown_figure"]

_ORDER = ["weights", "gradients", "master weights", "optimizer moments", "activations",
          "KV cache"]


def breakdown_figure(configs: Mapping[str, Mapping[str, float]], *, title: str = "Memory",
                     capacity_gb: Optional[float] = None, capacity_label: str = "GPU memory",
                     unit: float = GB) -> go.Figure:
    """One stacked bar per configuration (label -> {part: bytes}), in GB (1e9 bytes).

    capacity_gb draws the memory of one GPU as a horizontal line, so "does it fit" is visible.
    """
    parts = [p for p in _ORDER if any(p in c for c in configs.values())]
    parts += sorted({p for c in configs.values() for p in c} - set(parts))
    labels = list(configs)
    fig = go.Figure()
    for part in parts:
        ys = [configs[k].get(part, 0.0) / unit for k in labels]
        fig.add_trace(go.Bar(x=labels, y=ys, name=part,
                             hovertemplate=f"{part}: %{{y:.1f}} GB<extra></extra>"))
    totals = [sum(configs[k].values()) / unit for k in labels]
    fig.add_trace(go.Scatter(x=labels, y=totals, mode="text", text=[f"{t:.1f} GB" for t in totals],
                             textposition="top center", showlegend=False, name="total"))
    if capacity_gb:
        fig.add_hline(y=capacity_gb, line={"color": "red", "dash": "dash"},
                      annotation_text=f"{capacity_label}: {capacity_gb:g} GB")
    fig.update_layout(barmode="stack", title=title, yaxis_title="GB (1e9 bytes)", height=400,
                      yaxis={"range": [0, max(totals + [capacity_gb or 0]) * 1.15 or 1]})
    return fig
