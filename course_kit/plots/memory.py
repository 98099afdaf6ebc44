"""Stacked bar charts of memory: what takes the bytes, per configuration (notebook 01), in GiB."""
from __future__ import annotations

from typing import Mapping, Optional

import plotly.graph_objects as go

from ..dtypes.memory import GB, GiB

__all__ = ["breakdown_figure"]

_ORDER = ["weights", "gradients", "master weights", "optimizer moments", "activations",
          "KV cache"]


def breakdown_figure(configs: Mapping[str, Mapping[str, float]], *, title: str = "Memory",
                     capacity_gib: Optional[float] = None, capacity_label: str = "GPU memory",
                     capacity_gb: Optional[float] = None, unit: float = GiB) -> go.Figure:
    """One stacked bar per configuration (label -> {part: bytes}), in GiB (2**30 bytes).

    capacity_gib draws the memory of one GPU as a horizontal line, so "does it fit" is visible
    (`capacity_gb`, in 10**9 bytes, is converted).
    """
    if capacity_gib is None and capacity_gb is not None:
        capacity_gib = capacity_gb * GB / GiB
    name = "GiB" if unit == GiB else ("GB" if unit == GB else f"x{unit:g} bytes")
    parts = [p for p in _ORDER if any(p in c for c in configs.values())]
    parts += sorted({p for c in configs.values() for p in c} - set(parts))
    labels = list(configs)
    fig = go.Figure()
    for part in parts:
        ys = [configs[k].get(part, 0.0) / unit for k in labels]
        fig.add_trace(go.Bar(x=labels, y=ys, name=part,
                             hovertemplate=f"{part}: %{{y:.1f}} {name}<extra></extra>"))
    totals = [sum(configs[k].values()) / unit for k in labels]
    fig.add_trace(go.Scatter(x=labels, y=totals, mode="text", text=[f"{t:.1f} {name}" for t in totals],
                             textposition="top center", showlegend=False, name="total"))
    if capacity_gib:
        fig.add_hline(y=capacity_gib * GiB / unit, line={"color": "red", "dash": "dash"},
                      annotation_text=f"{capacity_label}: {capacity_gib * GiB / unit:.1f} {name}")
    fig.update_layout(barmode="stack", title=title, yaxis_title=f"{name} ({'2^30' if unit == GiB else unit} bytes)",
                      height=400, yaxis={"range": [0, max(totals + [(capacity_gib or 0) * GiB / unit]) * 1.15 or 1]})
    return fig
