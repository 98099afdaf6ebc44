"""Figures for notebook 07: timelines (Gantt charts of lanes), idle fraction and throughput sweeps."""
from __future__ import annotations

import re
from typing import Iterable, Mapping, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..streams.sweep import idle_share_key
from ..streams.timeline import Timeline

# A stable colour per kind of work, keyed by the span's name without its index ("step 3" -> "step").
_PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
            "#7f7f7f", "#bcbd22", "#17becf"]


_INDEXED = re.compile(r"^([A-Za-z][A-Za-z ]*?) (\d+|[A-Z])$")


def _kind(name: str) -> str:
    """The legend entry of a span: its name without a trailing index ("work 0", "spin A", "step 12"),
    else the whole name ("spin, then x = 1", "H2D copy"): never a clipped word such as "spin,"."""
    if not name:
        return "work"
    indexed = _INDEXED.match(name)       # words, then an index; not "x = 1", an assignment
    return indexed.group(1) if indexed else name


def _as_timeline(tl: Timeline | Iterable[Mapping]) -> Timeline:
    return tl if isinstance(tl, Timeline) else Timeline.from_records(tl)


def _gantt_traces(tl: Timeline, colours: dict[str, str], shown: set[str],
                  lanes: Sequence[str] | None = None) -> list[go.Bar]:
    traces = []
    by_kind: dict[str, list] = {}
    for s in tl.spans:
        if lanes is not None and s.lane not in lanes:
            continue
        by_kind.setdefault(_kind(s.name), []).append(s)
    for kind, spans in by_kind.items():
        colour = colours.setdefault(kind, _PALETTE[len(colours) % len(_PALETTE)])
        traces.append(go.Bar(
            y=[s.lane for s in spans], x=[s.duration_s * 1e3 for s in spans],
            base=[s.start_s * 1e3 for s in spans], orientation="h", name=kind,
            marker_color=colour, legendgroup=kind, showlegend=kind not in shown,
            text=[s.name for s in spans], textposition="none",    # names on hover: never piled up
            hovertemplate="%{text}<br>%{base:.3f} ms + %{x:.3f} ms<extra>%{y}</extra>"))
        shown.add(kind)
    return traces


def gantt(timeline: Timeline | Iterable[Mapping], title: str = "Timeline",
          lanes: Sequence[str] | None = None) -> go.Figure:
    """One horizontal bar per span, one row per lane (stream, thread), time in milliseconds."""
    tl = _as_timeline(timeline)
    fig = go.Figure(_gantt_traces(tl, {}, set(), lanes))
    order = list(lanes) if lanes is not None else tl.lanes
    # height per lane; the legend below the chart, where it never squeezes the lanes or gets cut
    fig.update_layout(title=title, barmode="overlay", xaxis_title="time (ms)",
                      height=190 + 44 * len(order), legend_title="work",
                      legend=dict(orientation="h", y=-0.35), margin=dict(l=10, r=10, t=60, b=40))
    fig.update_yaxes(categoryorder="array", categoryarray=list(reversed(order)))
    return fig


def gantt_pair(timelines: Mapping[str, Timeline | Iterable[Mapping]], title: str = "",
               lanes: Sequence[str] | None = None, shared_x: bool = True) -> go.Figure:
    """Several timelines stacked on one time axis (e.g. sync above async), with their idle share."""
    names = list(timelines)
    tls = {n: _as_timeline(t) for n, t in timelines.items()}
    orders = [list(lanes) if lanes is not None else tls[n].lanes for n in names]
    # height per lane, so that a timeline with many lanes (streams, ranks) keeps readable rows
    fig = make_subplots(rows=len(names), cols=1, shared_xaxes=shared_x, subplot_titles=names,
                        vertical_spacing=0.3 / len(names), row_heights=[max(len(o), 1) for o in orders])
    colours: dict[str, str] = {}
    shown: set[str] = set()
    for i, (n, order) in enumerate(zip(names, orders), start=1):
        for tr in _gantt_traces(tls[n], colours, shown, lanes):
            fig.add_trace(tr, row=i, col=1)
        fig.update_yaxes(categoryorder="array", categoryarray=list(reversed(order)), row=i, col=1)
    fig.update_layout(title=title, barmode="overlay", legend_title="work",
                      height=110 + 70 * len(names) + 42 * sum(max(len(o), 1) for o in orders),
                      margin=dict(l=10, r=10, t=70, b=40))
    fig.update_xaxes(title_text="time (ms)", row=len(names), col=1)
    return fig


IDLE_TITLES = {"gpu_idle_fraction": "GPU idle (profiler: kernel intervals)",
               "host_step_gap_fraction": "time between step brackets (host timeline)"}


def idle_and_throughput(rows: Sequence[Mapping], x: str = "batch", group: str | None = None,
                        title: str = "Sync against async", idle_key: str | None = None) -> go.Figure:
    """Two panels against `x`: an idle share and throughput, one line per mode.

    `rows`: dicts with keys `mode` ("sync"/"async"), `x`, `tokens_per_s`, the idle share `idle_key`
    (default: the profiler's `gpu_idle_fraction` where every row has it, else the host timeline's
    `host_step_gap_fraction`; the panel's title names which), and optionally `group`.
    """
    if idle_key is None:
        idle_key = idle_share_key(rows)
    fig = make_subplots(rows=1, cols=2, subplot_titles=(IDLE_TITLES.get(idle_key, idle_key), "throughput"),
                        horizontal_spacing=0.14)
    dash = {"sync": "dot", "async": "solid"}
    # a sweep of one batch per mode has no line to dash: the markers and a label tell the modes apart
    symbol = {"sync": "circle-open", "async": "diamond"}
    keys: dict[tuple, list[Mapping]] = {}
    for r in rows:
        keys.setdefault((r["mode"], r.get(group) if group else None), []).append(r)
    groups = sorted({k[1] for k in keys}, key=str)
    for (mode, g), rs in keys.items():
        rs = sorted(rs, key=lambda r: r[x])
        label = f"{mode}" + (f", {group}={g}" if group else "")
        colour = _PALETTE[groups.index(g) % len(_PALETTE)]
        style = dict(color=colour, dash=dash.get(mode, "solid"))
        marker = dict(symbol=symbol.get(mode, "square"), size=11, line=dict(width=2, color=colour))
        single = len(rs) == 1
        shown = dict(mode="lines+markers+text" if single else "lines+markers", line=style, marker=marker,
                     legendgroup=label, text=[mode] * len(rs) if single else None,
                     textposition="middle right" if mode == "async" else "middle left")
        fig.add_trace(go.Scatter(x=[r[x] for r in rs], y=[r[idle_key] for r in rs], name=label, **shown), 1, 1)
        fig.add_trace(go.Scatter(x=[r[x] for r in rs], y=[r["tokens_per_s"] for r in rs],
                                 name=label, showlegend=False, **shown), 1, 2)
    fig.update_yaxes(title_text="share of wall time", tickformat=".0%", row=1, col=1)
    fig.update_yaxes(title_text="tokens / s", row=1, col=2)
    ticks = sorted({r[x] for r in rows})      # every measured value, whole: no "2, 5" without its decade
    for col in (1, 2):
        fig.update_xaxes(title_text=x, type="log", tickmode="array", tickvals=ticks, ticktext=[f"{t:g}" for t in ticks],
                         row=1, col=col)
    fig.update_layout(title=title, height=420)
    return fig


def _plain(v: float) -> str:
    """A bar's label without exponent notation: 3,120 rather than 3.12e+03."""
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


def bars(rows: Sequence[Mapping], x: str, y: str, title: str = "", y_title: str = "",
         colour: str | None = None) -> go.Figure:
    """A plain bar chart of `y` per `x` (the capstone's table as a figure)."""
    fig = go.Figure(go.Bar(x=[str(r[x]) for r in rows], y=[r[y] for r in rows],
                           marker_color=colour or _PALETTE[0],
                           text=[_plain(r[y]) for r in rows], textposition="outside", cliponaxis=False))
    fig.update_layout(title=title, yaxis_title=y_title or y, height=400, yaxis_tickformat=",.0f")
    return fig


def overlap_figure(run: Mapping, device_lane: str = "device") -> go.Figure:
    """One run of the step loop (a `streams.decode_loop` result): the host and device lanes, each
    labelled with its idle share of the wall time (notebook 07's overlap widget)."""
    tl = _as_timeline(run["timeline"])
    lanes = [lane for lane in ("cpu", device_lane) if lane in tl.lanes]
    idle = {lane: tl.idle_fraction(lane) for lane in lanes}
    fig = gantt(tl, title=(f"{run.get('mode', '')}: wall {run['wall_s'] * 1e3:.1f} ms; idle "
                           + ", ".join(f"{lane} {v:.0%}" for lane, v in idle.items())), lanes=lanes)
    fig.update_traces(textposition="none")      # many short spans: names on hover only, no piled-up labels
    fig.update_yaxes(ticktext=[f"{lane} (idle {idle[lane]:.0%})" for lane in lanes], tickvals=lanes)
    fig.update_layout(height=280, margin=dict(t=50, b=40, l=10, r=10))
    return fig
