"""Figures of a profiler trace (notebooks 03, 05, 07, 10): a kernel Gantt chart with the launch gaps
inside each step marked, and the top kernels by GPU time. Input: `profiling.trace.gantt_rows` and
`profiling.trace.summarize` (a live trace, or one kept in data/reference/<slug>/traces/)."""
from __future__ import annotations

from typing import Mapping, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..profiling import intervals as iv

_KIND_COLOUR = {"kernel": "#1f77b4", "memcpy": "#2ca02c", "memset": "#8c564b", "cpu_op": "#9467bd",
                "matmul": "#1f77b4", "other": "#ff7f0e"}
GAP_COLOUR = "#d62728"
GAP_LANE = "launch gaps"
LANE_PX = 34          # height per lane: labels never pile up, however many lanes


def _short(name: str, n: int = 60) -> str:
    return name if len(name) <= n else name[: n - 1] + "…"


def step_gaps(rows: Sequence[Mapping], threshold_us: float) -> list[tuple[float, float]]:
    """Idle intervals of at least `threshold_us` inside each step's span (first to last activity)."""
    spans: dict[int, list[float]] = {}
    for r in rows:
        if r.get("step") is not None:
            s = spans.setdefault(r["step"], [r["start_us"], r["end_us"]])
            s[0], s[1] = min(s[0], r["start_us"]), max(s[1], r["end_us"])
    busy = [(r["start_us"], r["end_us"]) for r in rows]
    out = []
    for lo, hi in spans.values():
        if hi > lo:
            out += [g for g in iv.gaps(busy, (lo, hi)) if g[1] - g[0] >= threshold_us]
    return out


def _traces(rows: Sequence[Mapping], threshold_us: float, shown: set[str]) -> tuple[list[go.Bar], list[str]]:
    lanes = sorted({r["lane"] for r in rows}, key=lambda s: (s.split()[0], int(s.split()[-1]) if s.split()[-1].isdigit() else 0))
    traces = []
    for kind in dict.fromkeys(r["kind"] for r in rows):
        rs = [r for r in rows if r["kind"] == kind]
        traces.append(go.Bar(
            y=[r["lane"] for r in rs], x=[(r["end_us"] - r["start_us"]) / 1e3 for r in rs],
            base=[r["start_us"] / 1e3 for r in rs], orientation="h", name=kind, legendgroup=kind,
            showlegend=kind not in shown, marker_color=_KIND_COLOUR.get(kind, "#7f7f7f"), marker_line_width=0,
            customdata=[[_short(r["name"], 90), r.get("step")] for r in rs], textposition="none",
            hovertemplate="%{customdata[0]}<br>step %{customdata[1]}: %{base:.3f} ms + %{x:.4f} ms<extra>%{y}</extra>"))
        shown.add(kind)
    gaps = step_gaps(rows, threshold_us)
    if gaps:
        traces.append(go.Bar(
            y=[GAP_LANE] * len(gaps), x=[(b - a) / 1e3 for a, b in gaps], base=[a / 1e3 for a, _ in gaps],
            orientation="h", name=f"gap ≥ {threshold_us:g} µs inside a step", legendgroup="gap",
            showlegend="gap" not in shown, marker_color=GAP_COLOUR, marker_line_width=0, textposition="none",
            hovertemplate="idle %{x:.4f} ms<extra>launch gap</extra>"))
        shown.add("gap")
        lanes = lanes + [GAP_LANE]
    return traces, lanes


def kernel_gantt(rows: Sequence[Mapping], title: str, threshold_us: float = 1.0) -> go.Figure:
    """One row per stream (or thread), one bar per kernel, copy or operator; a red row below marks
    the idle gaps of at least `threshold_us` inside each step. Time in ms from the first activity."""
    traces, lanes = _traces(rows, threshold_us, set())
    fig = go.Figure(traces)
    fig.update_yaxes(categoryorder="array", categoryarray=list(reversed(lanes)))
    fig.update_layout(title=title, barmode="overlay", xaxis_title="time (ms)", bargap=0.25,
                      height=150 + LANE_PX * max(len(lanes), 2), margin=dict(l=10, r=10, t=60, b=40),
                      legend=dict(orientation="h", y=-0.25 if len(lanes) > 2 else -0.45))
    return fig


def gantt_pair(runs: Mapping[str, Sequence[Mapping]], title: str, thresholds: Mapping[str, float] | None = None) -> go.Figure:
    """Several kernel Gantt charts stacked, each on its own time axis (a CPU trace beside an H200's)."""
    names = list(runs)
    built = [_traces(runs[n], (thresholds or {}).get(n, 1.0), set()) for n in names]
    heights = [max(len(lanes), 2) for _, lanes in built]
    fig = make_subplots(rows=len(names), cols=1, subplot_titles=names, row_heights=heights,
                        vertical_spacing=min(0.12, 0.45 / len(names)))
    shown: set[str] = set()
    for i, (traces, lanes) in enumerate(built, start=1):
        for t in traces:
            t.showlegend = t.legendgroup not in shown
            shown.add(t.legendgroup)
            fig.add_trace(t, row=i, col=1)
        fig.update_yaxes(categoryorder="array", categoryarray=list(reversed(lanes)), row=i, col=1)
    fig.update_xaxes(title_text="time (ms), from each run's first activity", row=len(names), col=1)
    fig.update_layout(title=title, barmode="overlay", bargap=0.25, margin=dict(l=10, r=10, t=70, b=40),
                      height=120 + 70 * len(names) + LANE_PX * sum(heights),
                      legend=dict(orientation="h", y=-0.12))
    return fig


def top_kernels(summary: Mapping, title: str, top: int = 8) -> go.Figure:
    """The costliest kernels (or operators) per step, in µs, with their calls per step."""
    rows = list(summary.get("top_kernels", []))[:top][::-1]
    unit = "kernel" if summary.get("device") == "cuda" else "operator"
    fig = go.Figure(go.Bar(
        y=[_short(r["name"], 48) for r in rows], x=[r["per_step_us"] for r in rows], orientation="h",
        marker_color="#1f77b4", customdata=[[r["name"], r["calls_per_step"], r["share"]] for r in rows],
        text=[f"{r['per_step_us']:,.1f} µs · {r['calls_per_step']:,.0f} calls · {r['share']:.0%}" for r in rows],
        textposition="auto", hovertemplate="%{customdata[0]}<br>%{x:,.1f} µs per step<extra></extra>"))
    fig.update_layout(title=title, xaxis_title=f"µs per step (each {unit}'s calls added up)",
                      height=140 + 36 * max(len(rows), 1), margin=dict(l=10, r=10, t=60, b=40))
    fig.update_yaxes(automargin=True)
    return fig
