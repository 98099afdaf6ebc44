"""Figures of notebook 08: online softmax, causal tiles, time and memory against S, the roofline."""
from __future__ import annotations

import math
from typing import Iterable, Mapping, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..attention import tiles
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


TILE_COLOURS = {"no mask": "#2ca02c", "masked": "#ff7f0e", "skipped": "#f0f0f0"}


def causal_tiles_figure(seq_len: int, block_m: int, block_n: int, causal: bool = True) -> go.Figure:
    """Which (query block, key block) tiles the kernel skips, runs unmasked, or runs masked (tiles.py).

    The title stays short (it is never cut); the counts are in the legend entries.
    """
    grid = tiles.tile_grid(seq_len, block_m, block_n, causal)
    code = {"skipped": 0, "no mask": 1, "masked": 2}
    z = [[code[state] for state in row] for row in grid]
    fig = go.Figure(go.Heatmap(z=z, text=grid, hovertemplate="query block %{y}, key block %{x}: %{text}<extra></extra>",
                               colorscale=[[0, TILE_COLOURS["skipped"]], [0.5, TILE_COLOURS["no mask"]],
                                           [1, TILE_COLOURS["masked"]]], zmin=0, zmax=2,
                               showscale=False, xgap=1 if len(grid[0]) <= 64 else 0,
                               ygap=1 if len(grid) <= 64 else 0, name="tiles", showlegend=False))
    # one legend entry per kind, with its count: the numbers the learner compares
    for state, n in tiles.tile_counts(grid).items():
        fig.add_scatter(x=[None], y=[None], mode="markers", name=f"{state}: {n}",
                        marker=dict(symbol="square", size=12, color=TILE_COLOURS[state],
                                    line=dict(color="#999", width=1)))
    fig.update_layout(title=f"{'Causal' if causal else 'Full'} tiles, S={seq_len}, {block_m}x{block_n}",
                      xaxis_title="key block", yaxis_title="query block", yaxis_autorange="reversed",
                      height=420, width=620, margin=dict(t=50, r=10),
                      legend=dict(title="tiles", x=1.02, y=1), plot_bgcolor="white")
    return fig


def program_work_figure(work_by_order: Mapping[str, Sequence[int]], title: str) -> go.Figure:
    """K/V tiles each persistent program multiplies through, one line per order of the items
    (gluon_flash.program_key_blocks), programs sorted from busiest: the kernel lasts as long as the
    first point, and the dashed line is where every program would end if the work were even."""
    fig = go.Figure()
    for name, work in work_by_order.items():
        fig.add_scatter(y=sorted(work, reverse=True), mode="lines", name=f"{name}: busiest {max(work)}")
    mean = sum(next(iter(work_by_order.values()))) / len(next(iter(work_by_order.values())))
    fig.add_hline(y=mean, line_dash="dash", annotation_text=f"mean {mean:.0f}")
    fig.update_layout(height=320, title=title, xaxis_title="program (busiest first)", yaxis_title="K/V tiles")
    return fig


def traffic_figure(rows: Sequence[Mapping], title: str = "HBM traffic, one forward") -> go.Figure:
    """Bars of counted HBM bytes (MiB, linear) per algorithm: rows {name, bytes}, standard attention first."""
    names = [r["name"] for r in rows]
    mib = [r["bytes"] / 2**20 for r in rows]
    fig = go.Figure(go.Bar(x=mib, y=names, orientation="h", text=[f"{m:.3g} MiB" for m in mib],
                           textposition="auto", cliponaxis=False,
                           marker_color=["#d62728" if "standard" in n else "#2ca02c" for n in names]))
    fig.update_layout(title=title, xaxis_title="MiB read + written (2²⁰ bytes)", height=90 + 50 * len(rows),
                      margin=dict(l=10, r=20, t=50, b=40), yaxis_autorange="reversed")
    return fig


def row_walk_figure(walk, step: int) -> go.Figure:
    """One query row after key block `step` (0-based): its scores (blocks seen in colour), the running
    max so far, and the output so far against the exact row (first head dims)."""
    if not 0 <= step < len(walk.steps):
        raise ValueError(f"step must be in [0, {len(walk.steps) - 1}]; got {step}")
    st = walk.steps[step]
    xs = list(range(len(walk.scores)))
    seen = ["#1f77b4" if i < st["end"] else "#dddddd" for i in xs]
    fig = make_subplots(rows=1, cols=2, column_widths=[0.6, 0.4],
                        subplot_titles=(f"scores, keys 0-{st['end'] - 1} folded", "output so far vs exact"))
    fig.add_scatter(x=xs, y=walk.scores, mode="markers", marker=dict(color=seen, size=5), name="score",
                    row=1, col=1)
    ms = [walk.steps[min(i // walk.block_n, step)]["m"] if i < st["end"] else None for i in xs]
    fig.add_scatter(x=xs, y=ms, mode="lines", line_shape="hv", line=dict(color="#d62728"), name="running max m",
                    row=1, col=1)
    dims = list(range(min(16, len(walk.exact))))
    fig.add_scatter(x=dims, y=[walk.exact[i] for i in dims], mode="markers", name="exact output",
                    marker=dict(symbol="circle-open", size=10, color="#333"), row=1, col=2)
    fig.add_scatter(x=dims, y=[st["out"][i] for i in dims], mode="markers", name="acc / l so far",
                    marker=dict(color="#2ca02c", size=7), row=1, col=2)
    fig.update_xaxes(title_text="key", row=1, col=1)
    fig.update_xaxes(title_text="head dim", row=1, col=2)
    fig.update_layout(title=f"Block {step + 1} of {len(walk.steps)}: m = {st['m']:.3f}, l = {st['l']:.3f}, "
                            f"max |out - exact| = {st['err']:.1e}", height=360, margin=dict(t=70),
                      legend=dict(orientation="h", y=-0.25))
    return fig


def log_ticks(values: Iterable[float]) -> dict:
    """A log axis labelled exactly at the values plotted (powers of two: 512, 1,024, ...). A dtick of
    log10(2) puts ticks at 10**(k * 0.30103), which plotly labels "8,192.001" (issue 42)."""
    ticks = sorted({int(v) if float(v).is_integer() else v for v in values})
    return {"type": "log", "tickvals": ticks, "ticktext": [f"{t:,}" for t in ticks]}


def _rows(rows: Iterable[Mapping], **where) -> list[Mapping]:
    return [r for r in rows if "median_s" in r and all(r.get(k) == v for k, v in where.items())]


def time_memory_figure(rows: Iterable[Mapping], head_dim: int = 128, title: str = "") -> go.Figure:
    """Median time and peak memory against sequence length, one line per variant (log-log)."""
    rows = _rows(rows, head_dim=head_dim, causal=True)
    fig = make_subplots(rows=1, cols=2, subplot_titles=("time per forward (ms)", "peak memory (MiB)"))
    for name in dict.fromkeys(r["variant"] for r in rows):
        pts = sorted((r for r in rows if r["variant"] == name), key=lambda r: r["seq_len"])
        colour = COLOURS.get(name)
        xs = [r["seq_len"] for r in pts]
        fig.add_scatter(x=xs, y=[r["median_s"] * 1e3 for r in pts], mode="lines+markers", name=name,
                        legendgroup=name, line=dict(color=colour), row=1, col=1)
        fig.add_scatter(x=xs, y=[r["peak_bytes"] / 2**20 for r in pts], mode="lines+markers", name=name,
                        legendgroup=name, showlegend=False, line=dict(color=colour), row=1, col=2)
    fig.update_xaxes(title_text="sequence length S", **log_ticks(r["seq_len"] for r in rows))
    fig.update_yaxes(type="log")
    fig.update_layout(height=420, title=title or f"Attention forward, causal, head dim {head_dim}")
    return fig


def sweep_figure(sweep: Iterable[Mapping], title: str = "") -> go.Figure:
    """The best Triton variant over SDPA flash against S: one line per (head dim, causal), solid
    for GPU time (CUDA graph replays), dotted for a call with its host launch; 1.0 is parity."""
    fig = go.Figure()
    groups: dict[tuple, list[Mapping]] = {}
    for r in sweep:
        groups.setdefault((r["head_dim"], r["causal"]), []).append(r)
    for (d, causal), pts in sorted(groups.items()):
        pts = sorted(pts, key=lambda r: r["seq_len"])
        label = f"D={d}, {'causal' if causal else 'not causal'}"
        graph = [r for r in pts if r.get("graph")]
        if graph:
            fig.add_scatter(x=[r["seq_len"] for r in graph], y=[r["graph"] for r in graph], mode="lines+markers",
                            name=f"{label}: GPU time", legendgroup=label)
        fig.add_scatter(x=[r["seq_len"] for r in pts], y=[r["per_call"] for r in pts], mode="lines+markers",
                        line=dict(dash="dot"), name=f"{label}: per call", legendgroup=label)
    fig.add_hline(y=1.0, line_dash="dash", annotation_text="as fast as SDPA flash")
    fig.update_xaxes(title_text="sequence length S", **log_ticks(r["seq_len"] for pts in groups.values() for r in pts))
    fig.update_yaxes(title_text="Triton / SDPA flash (TFLOP/s)")
    fig.update_layout(height=420, title=title or "Triton flash forward against SDPA flash across the sweep")
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
                       peaks=None, title: str = "", dtype: str = "bf16") -> go.Figure | None:
    """The kernels at `shape` on notebook 00's measured roofline (or the datasheet's, if none),
    with the ceilings of `dtype` only (the kernels' dtype) and the kernels named in the legend."""
    points = roofline_points(rows, shape)
    title = title or f"Attention on the roofline (S={shape.get('seq_len')}, D={shape.get('head_dim')})"
    if roofline_record is not None:
        fig = roofline_from_record(dict(roofline_record), points, title=title)
        summary = roofline_record["summary"]
        kept = dtype if dtype in summary.get("matmul_tflops", {}) else None
        if kept:
            # only this dtype's ceilings (the kernels' dtype): four dtypes' roofs crowd the figure
            others = tuple(f"{d} " for d in summary["matmul_tflops"] if d != kept)
            fig.data = [t for t in fig.data if not (t.name or "").startswith(others)]
            ridge = f"{summary['matmul_tflops'][kept] * 1e3 / summary['copy_gbs']:.0f}"
            fig.layout.annotations = [a for a in fig.layout.annotations
                                      if "ridge" not in (a.text or "") or ridge in a.text]
    elif peaks is not None and peaks.bf16:
        fig = roofline_figure(peaks.hbm_gbs, {"bf16 (datasheet)": peaks.bf16}, points, title=title)
    else:
        return None
    fig.update_xaxes(range=[0, 4])          # 1 to 10,000 FLOP/byte: where attention's kernels sit
    tops = [max(t.y) for t in fig.data if t.y is not None and len(t.y) > 1]
    lows = [p["tflops"] for p in points if p.get("tflops")]
    if tops and lows:                       # from a third of the slowest kernel to above the roof
        fig.update_yaxes(range=[math.log10(min(lows) / 3), math.log10(max(tops) * 2)])
    return _legend_not_labels(fig, {p["name"] for p in points})


def _legend_not_labels(fig: go.Figure, names: set[str]) -> go.Figure:
    """The fused kernels share one intensity, so text labels beside their markers overlap: name
    them in the legend instead (each marker in its variant's colour and its own symbol)."""
    symbols = ["diamond", "circle", "square", "triangle-up", "star", "x", "cross", "pentagon", "hexagon"]
    k = 0
    for trace in fig.data:
        if trace.name in names and trace.mode and "text" in trace.mode:
            trace.mode = "markers"
            trace.text = None
            trace.marker.color = COLOURS.get(trace.name, "#333")
            trace.marker.symbol = symbols[k % len(symbols)]
            trace.hovertemplate = f"{trace.name}: %{{x:.3g}} FLOP/B, %{{y:.3g}} TFLOP/s<extra></extra>"
            k += 1
    # below the plot, in rows: long roof names ("bf16 (measured), ridge 188 FLOP/B") are never cut
    fig.update_layout(legend=dict(orientation="h", x=0, y=-0.2, yanchor="top"), height=560,
                      margin=dict(r=20, b=40))
    return fig
