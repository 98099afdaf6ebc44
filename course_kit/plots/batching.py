"""Figures for notebook 06: batch-slot Gantt charts, throughput vs latency, KV-block usage."""
from __future__ import annotations

import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

_PALETTE = qualitative.Plotly + qualitative.D3


def _request_color(rid: str) -> str:
    digits = "".join(c for c in str(rid) if c.isdigit())
    return _PALETTE[(int(digits) if digits else hash(rid)) % len(_PALETTE)]


def log_ticks(values, per_decade: tuple[int, ...] = (1, 2, 5)) -> dict:
    """Tick values and full labels for a log axis spanning `values`: 1-2-5 in every decade, each label
    the whole number ("20", "50", "200"), where plotly alone writes the 2 and 5 without their decade.
    (Its `minorloglabels` would do it, but not in the plotly Colab ships.)"""
    import math
    positive = [float(v) for v in values if v is not None and v > 0]
    if not positive:
        return {}
    lo, hi = math.floor(math.log10(min(positive))), math.ceil(math.log10(max(positive)))
    ticks = [m * 10.0 ** e for e in range(lo, hi + 1) for m in per_decade if min(positive) / 1.5 <= m * 10.0 ** e <= max(positive) * 1.5]
    return {"tickvals": ticks, "ticktext": [f"{t:,.10g}" for t in ticks]}


def _phase_legend(fig: go.Figure, row: int | None = None, col: int | None = None) -> None:
    """Bars take each request's colour, so the legend says what faded and solid mean, in grey."""
    for phase, opacity in (("prefill (faded)", 0.4), ("decode (solid)", 1.0)):
        trace = go.Bar(x=[None], y=[None], orientation="h", name=phase, opacity=opacity,
                       marker_color="#555555", showlegend=True, hoverinfo="skip")
        fig.add_trace(trace, row=row, col=col) if row else fig.add_trace(trace)


def gantt(timelines: dict[str, list[dict]], title: str = "Requests over batch slots") -> go.Figure:
    """One panel per policy: each bar is a request on a batch slot; faded = prefill, solid = decode.

    `timelines` maps a policy name to `engine.metrics.slot_intervals(steps)` rows
    ({"request", "slot", "phase", "start", "end"}).
    """
    names = list(timelines)
    fig = make_subplots(rows=len(names), cols=1, shared_xaxes=True, subplot_titles=names,
                        vertical_spacing=0.08 if len(names) > 1 else 0.0)
    for i, name in enumerate(names, start=1):
        rows = timelines[name]
        for phase, opacity in (("prefill", 0.4), ("decode", 1.0)):
            sel = [r for r in rows if r["phase"] == phase]
            if not sel:
                continue
            fig.add_trace(go.Bar(
                x=[r["end"] - r["start"] for r in sel], base=[r["start"] for r in sel],
                y=[r["slot"] for r in sel], orientation="h", opacity=opacity,
                marker_color=[_request_color(r["request"]) for r in sel], marker_line_width=0,
                name=phase, showlegend=False,
                customdata=[[r["request"], r["phase"]] for r in sel],
                hovertemplate="request %{customdata[0]} (%{customdata[1]})<br>slot %{y}<br>"
                              "%{base:.3f}s + %{x:.3f}s<extra></extra>"), row=i, col=1)
        fig.update_yaxes(title_text="slot", autorange="reversed", row=i, col=1)
    _phase_legend(fig, 1, 1)
    fig.update_xaxes(title_text="time (s)", row=len(names), col=1)
    fig.update_layout(title=title, barmode="overlay", height=220 * len(names) + 100, bargap=0.15,
                      legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="right", x=1))
    return fig


def throughput_latency(points: list[dict], latency: str = "latency_p50_s",
                       title: str = "Throughput against latency") -> go.Figure:
    """Scatter of output tokens/s against a latency figure; one trace per policy ("name"),
    points joined in order (e.g. increasing load or concurrency, given in "label")."""
    fig = go.Figure()
    for name in dict.fromkeys(p["name"] for p in points):
        sel = [p for p in points if p["name"] == name]
        fig.add_trace(go.Scatter(
            x=[p[latency] for p in sel], y=[p["throughput_tok_s"] for p in sel], name=name,
            mode="lines+markers+text" if any("label" in p for p in sel) else "markers",
            text=[str(p.get("label", "")) for p in sel], textposition="top center"))
    fig.update_layout(title=title, xaxis_title=latency.replace("_s", " (s)").replace("_", " "),
                      yaxis_title="throughput (output tokens/s)", height=420)
    return fig


def block_usage(usage: dict[str, dict], title: str = "KV-cache blocks in use") -> go.Figure:
    """Fraction of KV blocks in use over time, per policy (`engine.metrics.block_usage` dicts)."""
    fig = go.Figure()
    for name, u in usage.items():
        fig.add_trace(go.Scatter(x=u["t"], y=u["used"], name=name, mode="lines", line_shape="hv"))
    fig.update_layout(title=title, xaxis_title="time (s)", yaxis_title="fraction of blocks in use",
                      yaxis_range=[0, 1.05], height=380)
    return fig


def latency_vs_concurrency(rows: list[dict], title: str = "Served latency against concurrent clients") -> go.Figure:
    """rows: {"policy", "concurrency", "latency_p50_s", "latency_p99_s", "ttft_p50_s"} -> p50 lines
    with p99 as dotted lines of the same colour."""
    fig = go.Figure()
    for i, policy in enumerate(dict.fromkeys(r["policy"] for r in rows)):
        sel = sorted((r for r in rows if r["policy"] == policy), key=lambda r: r["concurrency"])
        color = _PALETTE[i % len(_PALETTE)]
        x = [r["concurrency"] for r in sel]
        fig.add_trace(go.Scatter(x=x, y=[r["latency_p50_s"] for r in sel], name=f"{policy} p50",
                                 mode="lines+markers", line_color=color))
        fig.add_trace(go.Scatter(x=x, y=[r["latency_p99_s"] for r in sel], name=f"{policy} p99",
                                 mode="lines+markers", line=dict(color=color, dash="dot")))
    fig.update_layout(title=title, xaxis_title="concurrent clients", yaxis_title="request latency (s)",
                      height=420)
    return fig


def throughput_bars(record: dict, title: str | None = None) -> go.Figure:
    """Output tokens/s of every engine run and peer in a `course-kit bench batching` record."""
    rows = [r for r in record.get("results", []) if r.get("throughput_tok_s")]
    env = record.get("environment", {})
    fig = go.Figure(go.Bar(
        x=[r["name"] for r in rows], y=[r["throughput_tok_s"] for r in rows],
        marker_color=["#636EFA" if r.get("policy") != "peer" else "#EF553B" for r in rows],
        text=[f"{r['throughput_tok_s']:,.0f}" for r in rows], textposition="outside"))
    fig.update_layout(title=title or f"Throughput on {env.get('gpu') or 'this machine'} (output tokens/s)",
                      yaxis_title="output tokens/s", yaxis_type="log", height=430)
    fig.update_yaxes(**log_ticks([r["throughput_tok_s"] for r in rows]))
    return fig


def live_figure(run: dict) -> go.Figure:
    """Notebook 06's live-engine widget: the slot Gantt of one run (top) and each request's TTFT and
    TPOT against its arrival (bottom), both in seconds on one time axis."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.62, 0.38], vertical_spacing=0.1,
                        subplot_titles=(f"{run['policy']}: requests over {run['slots']} slots",
                                        "per request, at its arrival: TTFT and TPOT"))
    rows = run["intervals"]
    for phase, opacity in (("prefill", 0.4), ("decode", 1.0)):
        sel = [r for r in rows if r["phase"] == phase]
        if sel:
            fig.add_trace(go.Bar(x=[r["end"] - r["start"] for r in sel], base=[r["start"] for r in sel],
                                 y=[r["slot"] for r in sel], orientation="h", opacity=opacity, name=phase,
                                 showlegend=False,
                                 marker_color=[_request_color(r["request"]) for r in sel], marker_line_width=0,
                                 customdata=[r["request"] for r in sel],
                                 hovertemplate="request %{customdata}<br>slot %{y}<extra></extra>"), row=1, col=1)
    lat = run["latencies"]
    for key, name, symbol in (("ttft_s", "TTFT", "circle"), ("tpot_s", "TPOT", "diamond")):
        fig.add_trace(go.Scatter(x=[r["arrival"] for r in lat], y=[r[key] * 1e3 for r in lat], mode="markers",
                                 name=name, marker_symbol=symbol, customdata=[r["request"] for r in lat],
                                 hovertemplate=f"request %{{customdata}}<br>{name} %{{y:.1f}} ms<extra></extra>"),
                      row=2, col=1)
    fig.update_yaxes(title_text="slot", autorange="reversed", dtick=1, row=1, col=1)
    _phase_legend(fig, 1, 1)
    ms = [r[k] * 1e3 for r in lat for k in ("ttft_s", "tpot_s") if r.get(k)]
    fig.update_yaxes(title_text="ms (log scale)", type="log", row=2, col=1,   # TPOT is ms, TTFT can be 100x
                     **log_ticks(ms))
    fig.update_xaxes(title_text="time since the first arrival (s)", row=2, col=1)
    fig.update_layout(barmode="overlay", height=560, bargap=0.15, margin=dict(t=50, b=40, l=10, r=10),
                      legend=dict(orientation="h", y=-0.12))
    return fig


def block_usage_facets(usage: dict[str, dict], title: str = "KV-cache blocks in use") -> go.Figure:
    """Block usage with one small panel per run, on one time axis: readable where one panel of many
    overlapping lines is not."""
    names = list(usage)
    fig = make_subplots(rows=len(names), cols=1, shared_xaxes=True, subplot_titles=names,
                        vertical_spacing=min(0.08, 0.3 / max(len(names), 1)))
    for i, (name, u) in enumerate(usage.items(), start=1):
        fig.add_trace(go.Scatter(x=u["t"], y=u["used"], name=name, mode="lines", line_shape="hv",
                                 fill="tozeroy", showlegend=False), row=i, col=1)
        fig.update_yaxes(range=[0, 1.05], tickformat=".0%", row=i, col=1)
    fig.update_xaxes(title_text="time (s)", row=len(names), col=1)
    fig.update_layout(title=title, height=130 * len(names) + 100, margin=dict(t=70, b=40))
    return fig
