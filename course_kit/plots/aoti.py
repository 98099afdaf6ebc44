"""Figures of notebook 04's AOTInductor section: a fresh process's cold start, phase by phase, and
the steady-state decode step of each peer (from `capture.aoti.cold_start` rows or an `aoti` record)."""
from __future__ import annotations

from typing import Mapping

import plotly.graph_objects as go
from plotly.subplots import make_subplots

PHASES = (("import_s", "import torch", "#bbbbbb"), ("context_s", "CUDA context", "#dddddd"),
          ("load_s", "load the package / build the model", "#636efa"), ("first_call_s", "first call", "#ef553b"))
LABELS = {"aoti": "AOTInductor .pt2", "compile": "torch.compile", "eager": "eager"}


def cold_start(cold: Mapping[str, Mapping], title: str = "Cold start in a fresh process") -> go.Figure:
    """Left: stacked seconds per phase until the first answer. Right: one steady-state call (µs)."""
    peers = [m for m in ("aoti", "compile", "eager") if m in cold]
    names = [LABELS[m] for m in peers]
    fig = make_subplots(rows=1, cols=2, column_widths=[0.62, 0.38],
                        subplot_titles=("until the first answer (s)", "one steady-state decode step (µs, log)"))
    for key, label, color in PHASES:
        if any(cold[m].get(key) for m in peers):
            fig.add_bar(y=names, x=[cold[m].get(key) or 0.0 for m in peers], name=label, orientation="h",
                        marker_color=color, row=1, col=1)
    fig.add_bar(y=names, x=[cold[m]["steady_s"] * 1e6 for m in peers], orientation="h", showlegend=False,
                marker_color="#00cc96", row=1, col=2)
    fig.update_xaxes(type="log", row=1, col=2)        # eager and a compiled step can be 1000x apart
    fig.update_yaxes(showticklabels=False, row=1, col=2)  # same rows as the left panel, labelled there
    fig.update_layout(title=title, barmode="stack", height=300, legend=dict(orientation="h", y=-0.25),
                      margin=dict(l=130))
    return fig
