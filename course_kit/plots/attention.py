"""Figures of notebook 08: online softmax, causal tiles, time and memory against S, the roofline."""
from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .roofline import roofline_figure, roofline_from_record

COLOURS = {"naive": "#d62728", "tiled (PyTorch)": "#ff7f0e", "triton": "#2ca02c", "triton (TMA)": "#17becf",
           "sdpa flash": "#1f77b4", "sdpa cudnn": "#9467bd", "sdpa efficient": "#8c564b", "sdpa math": "#7f7f7f",
           "xformers": "#e377c2"}


def online_softmax_figure(x: Sequence[float], history: Sequence[tuple[float, float]]) -> go.Figure:
    """The scores of one row, with the running max m_t and running sum l_t after each element."""
    steps = list(range(1, len(x) + 1))
    fig = make_subplots(rows=1, cols=2, subplot_titles=("scores and running max m_t", "running sum l_t"))
    fig.add_bar(x=steps, y=list(x), name="score x_t", marker_color="#aec7e8", row=1, col=1)
    fig.add_scatter(x=steps, y=[m for m, _ in history], mode="lines+markers", name="m_t", line_shape="hv",
                    line=dict(color="#d62728"), row=1, col=1)
    fig.add_scatter(x=steps, y=[s for _, s in history], mode="lines+markers", name="l_t",
                    line=dict(color="#2ca02c"), row=1, col=2)
    fig.update_xaxes(title_text="element t")
    fig.update_layout(height=350, title="Online softmax: one pass, rescaling the sum whenever the max grows")
    return fig


def causal_tiles_figure(seq_len: int, block_m: int, block_n: int) -> go.Figure:
    """Which (query block, key block) tiles the causal kernel skips, runs unmasked, or runs masked."""
    if seq_len < 1 or block_m < 1 or block_n < 1:
        raise ValueError(f"seq_len, block_m and block_n must be >= 1; got {seq_len}, {block_m}, {block_n}")
    n_m, n_n = -(-seq_len // block_m), -(-seq_len // block_n)
    z, text = [], []
    for i in range(n_m):
        first, last = i * block_m, min(seq_len, (i + 1) * block_m) - 1
        full_end = (min(seq_len, first) // block_n) * block_n   # as in the kernel
        row, row_text = [], []
        for j in range(n_n):
            k0 = j * block_n
            if k0 > last:
                row.append(0), row_text.append("skipped")
            elif k0 + block_n <= full_end:
                row.append(1), row_text.append("no mask")
            else:
                row.append(2), row_text.append("masked")
        z.append(row), text.append(row_text)
    fig = go.Figure(go.Heatmap(z=z, text=text, hovertemplate="query block %{y}, key block %{x}: %{text}<extra></extra>",
                               colorscale=[[0, "#f0f0f0"], [0.5, "#2ca02c"], [1, "#ff7f0e"]], zmin=0, zmax=2,
                               showscale=False, xgap=1, ygap=1))
    counts = {name: sum(r.count(name) for r in text) for name in ("no mask", "masked", "skipped")}
    fig.update_layout(title=f"Causal tiles, S={seq_len}, {block_m}x{block_n}: " +
                            ", ".join(f"{v} {k}" for k, v in counts.items()),
                      xaxis_title="key block", yaxis_title="query block", yaxis_autorange="reversed",
                      height=380, width=480)
    return fig


def _rows(rows: Iterable[Mapping], **where) -> list[Mapping]:
    return [r for r in rows if "median_s" in r and all(r.get(k) == v for k, v in where.items())]


def time_memory_figure(rows: Iterable[Mapping], head_dim: int = 128, title: str = "") -> go.Figure:
    """Median time and peak memory against sequence length, one line per variant (log-log)."""
    rows = _rows(rows, head_dim=head_dim)
    fig = make_subplots(rows=1, cols=2, subplot_titles=("time per forward (ms)", "peak memory (MiB)"))
    for name in dict.fromkeys(r["variant"] for r in rows):
        pts = sorted((r for r in rows if r["variant"] == name), key=lambda r: r["seq_len"])
        colour = COLOURS.get(name)
        xs = [r["seq_len"] for r in pts]
        fig.add_scatter(x=xs, y=[r["median_s"] * 1e3 for r in pts], mode="lines+markers", name=name,
                        legendgroup=name, line=dict(color=colour), row=1, col=1)
        fig.add_scatter(x=xs, y=[r["peak_bytes"] / 2**20 for r in pts], mode="lines+markers", name=name,
                        legendgroup=name, showlegend=False, line=dict(color=colour), row=1, col=2)
    fig.update_xaxes(type="log", title_text="sequence length S", dtick=0.30103)
    fig.update_yaxes(type="log")
    fig.update_layout(height=420, title=title or f"Attention forward, head dim {head_dim}")
    return fig


def tflops_figure(rows: Iterable[Mapping], shape: Mapping, peak_tflops: float | None = None,
                  title: str = "") -> go.Figure:
    """Achieved TFLOP/s per variant at one shape, with the GPU's matmul peak as a line."""
    pts = sorted(_rows(rows, **shape), key=lambda r: r["tflops"])
    fig = go.Figure(go.Bar(x=[r["tflops"] for r in pts], y=[r["variant"] for r in pts], orientation="h",
                           marker_color=[COLOURS.get(r["variant"], "#999") for r in pts],
                           text=[f"{r['tflops']:.3g}" for r in pts], textposition="auto"))
    if peak_tflops:
        fig.add_vline(x=peak_tflops, line_dash="dot", annotation_text="matmul peak")
    fig.update_layout(title=title or "Achieved TFLOP/s (causal FLOPs counted as half)", xaxis_title="TFLOP/s",
                      height=60 + 40 * max(1, len(pts)))
    return fig


def roofline_points(rows: Iterable[Mapping], shape: Mapping) -> list[dict]:
    """{name, intensity, tflops} per variant at one shape, for plots.roofline."""
    return [{"name": r["variant"], "intensity": r["intensity"], "tflops": r["tflops"]}
            for r in _rows(rows, **shape) if r.get("intensity")]


def attention_roofline(rows: Iterable[Mapping], shape: Mapping, roofline_record: Mapping | None = None,
                       peaks=None, title: str = "") -> go.Figure | None:
    """The kernels at `shape` on notebook 00's measured roofline (or the datasheet's, if none)."""
    points = roofline_points(rows, shape)
    title = title or f"Attention on the roofline (S={shape.get('seq_len')}, D={shape.get('head_dim')})"
    if roofline_record is not None:
        return roofline_from_record(dict(roofline_record), points, title=title)
    if peaks is not None and peaks.bf16:
        return roofline_figure(peaks.hbm_gbs, {"bf16 (datasheet)": peaks.bf16}, points, title=title)
    return None
