"""Figures of notebook 09: bus bandwidth, pipeline timelines and bubbles, TP scaling, MoE load."""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import plotly.graph_objects as go

from .tables import Table

from ..parallel import comm, pipeline

__all__ = ["busbw_figure", "timeline_figure", "bubble_figure", "scaling_figure",
           "tokens_table", "bar_figure"]

_KIND_COLOR = {"F": "#1f77b4", "B": "#ff7f0e"}


def busbw_figure(series: Mapping[str, Sequence[Mapping[str, Any]]], *, op: str = "all_reduce",
                 model: Mapping[str, float] | None = None, title: str | None = None) -> go.Figure:
    """Bus bandwidth (GB/s) against message size, one line per (label, world size).

    `series` maps a label (machine) to result rows with op, bytes, n, busbw_GBps. `model`
    ({"alpha_s", "bandwidth_Bps", "n"}) adds the alpha-beta curve.
    """
    fig = go.Figure()
    for label, rows in series.items():
        sel = [r for r in rows if r.get("op") == op]
        for n in sorted({r["n"] for r in sel}):
            pts = sorted((r["bytes"], r["busbw_GBps"]) for r in sel if r["n"] == n)
            fig.add_trace(go.Scatter(x=[p[0] for p in pts], y=[p[1] for p in pts],
                                     mode="lines+markers", name=f"{label}, n={n}"))
    if model:
        sizes = [2 ** k for k in range(8, 31)]
        n = int(model["n"])
        ys = [comm.busbw(op, s, comm.collective_time(op, s, n, model["alpha_s"],
                                                      model["bandwidth_Bps"]), n) / 1e9
              for s in sizes]
        fig.add_trace(go.Scatter(x=sizes, y=ys, mode="lines", line={"dash": "dot"},
                                 name=f"alpha-beta model, n={n}"))
    fig.update_layout(title=title or f"{op}: bus bandwidth against message size",
                      xaxis={"type": "log", "title": "message size (bytes)"},
                      yaxis={"title": "bus bandwidth (GB/s)"}, height=420)
    return fig


LANE_PX, LANE_TOP = 70, 150       # a timeline's height: pixels per rank, and for title, legend and axis


def timeline_figure(events: Sequence[Mapping[str, Any]], *, title: str = "Pipeline timeline",
                    unit: str = "s") -> go.Figure:
    """Gantt chart: one row per rank, forward (blue) and backward (orange) boxes per micro-batch."""
    fig = go.Figure()
    shown: set[str] = set()
    t0 = min(e["start"] for e in events) if events else 0.0
    scale = {"s": 1.0, "ms": 1e3}.get(unit, 1.0)
    for e in events:
        k = e["kind"]
        fig.add_trace(go.Bar(
            base=[(e["start"] - t0) * scale], x=[(e["end"] - e["start"]) * scale],
            y=[f"rank {e['rank']}"], orientation="h", marker_color=_KIND_COLOR[k],
            text=[str(e["mb"])], textposition="inside", insidetextanchor="middle",
            name="forward" if k == "F" else "backward", showlegend=k not in shown,
            hovertemplate=f"{'forward' if k == 'F' else 'backward'} of micro-batch {e['mb']}"
                          "<extra></extra>"))
        shown.add(k)
    ranks = sorted({e["rank"] for e in events})
    # height per lane, and the legend above the plot: at 45 px a lane the plot area of two ranks was
    # ~20 px per rank and a side legend was clipped to one entry (issue 42)
    fig.update_layout(title=f"{title} (bubble {pipeline.bubble_of(events):.0%})" if events else title,
                      barmode="overlay", height=LANE_TOP + LANE_PX * max(1, len(ranks)),
                      margin={"t": 90, "b": 50}, bargap=0.25,
                      legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0},
                      uniformtext={"minsize": 9, "mode": "hide"},
                      xaxis={"title": f"time ({unit})"},
                      yaxis={"categoryorder": "array",
                             "categoryarray": [f"rank {r}" for r in reversed(ranks)]})
    return fig


def bubble_figure(rows: Sequence[Mapping[str, Any]], p: int, *, title: str | None = None) -> go.Figure:
    """Measured bubble fraction against micro-batches m, beside (p-1)/(m+p-1)."""
    rows = [r for r in rows if r.get("p") == p and "bubble" in r]
    ms = sorted({r["m"] for r in rows}) or [1, 2, 4, 8]
    dense = list(range(1, max(ms) + 1))
    fig = go.Figure(go.Scatter(x=dense, y=[pipeline.bubble_theory(p, m) for m in dense],
                               mode="lines", name="(p-1)/(m+p-1)"))
    for kind in pipeline.SCHEDULES:
        pts = sorted((r["m"], r["bubble"]) for r in rows if r["schedule"] == kind)
        if pts:
            fig.add_trace(go.Scatter(x=[a for a, _ in pts], y=[b for _, b in pts],
                                     mode="markers+lines", name=f"measured, {kind}"))
    # labelled at the m values only: an auto log axis also labels minor ticks (a stray "9" left of 1)
    ticks = [m for m in (1, 2, 4, 8, 16, 32, 64) if m <= max(dense)]
    fig.update_layout(title=title or f"Pipeline bubble with p={p} stages",
                      xaxis={"title": "micro-batches m", "type": "log", "tickvals": ticks,
                             "ticktext": [str(m) for m in ticks], "range": [-0.05, math.log10(max(dense)) + 0.05]},
                      yaxis={"title": "idle fraction", "range": [0, 1]}, height=380)
    return fig


def _decode_rows(record: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [r for r in record.get("results", []) if r.get("name") == "decode"]


def scaling_figure(records: Mapping[str, Mapping[str, Any]], *, what: str = "decode") -> go.Figure:
    """Speed-up against the number of GPUs from several records (label -> record).

    what="decode": tokens/s speed-up per model; what="mlp": TP MLP speed-up. The ideal line
    (speed-up = n) is drawn for reference.
    """
    fig = go.Figure()
    top = 1
    for label, rec in records.items():
        if what == "mlp":
            pts = sorted((r["tp"], r.get("speedup")) for r in rec.get("results", [])
                         if r.get("name") == "tp_mlp" and r.get("speedup"))
            if pts:
                fig.add_trace(go.Scatter(x=[a for a, _ in pts], y=[b for _, b in pts],
                                         mode="lines+markers", name=f"TP MLP, {label}"))
                top = max(top, pts[-1][0])
            continue
        for model in sorted({r["model"] for r in _decode_rows(rec)}):
            pts = sorted((r["tp"], r.get("speedup")) for r in _decode_rows(rec)
                         if r["model"] == model and r.get("speedup"))
            if pts:
                fig.add_trace(go.Scatter(x=[a for a, _ in pts], y=[b for _, b in pts],
                                         mode="lines+markers", name=f"{model}, {label}"))
                top = max(top, pts[-1][0])
    ideal = [n for n in (1, 2, 4, 8) if n <= top]
    fig.add_trace(go.Scatter(x=ideal, y=ideal, mode="lines", line={"dash": "dot", "color": "grey"},
                             name="ideal (n x)"))
    fig.update_layout(title="Decode speed-up over one GPU" if what == "decode"
                      else "TP MLP speed-up over one GPU",
                      xaxis={"title": "GPUs (tensor parallel)", "type": "log", "tickvals": ideal},
                      yaxis={"title": "speed-up"}, height=400)
    return fig


def tokens_table(records: Mapping[str, Mapping[str, Any]]) -> Table:
    """A gpt-fast style table: tokens/s of batch-1 decode per model and number of GPUs."""
    rows = []
    for label, rec in records.items():
        for r in _decode_rows(rec):
            rows.append((r["model"], r["tp"], label, r["tokens_per_s"], r.get("speedup"),
                         r.get("mode", ""), r.get("fp32_tokens_identical")))
    rows.sort()
    return Table(["model", "GPUs", "machine", "tokens/s", "speed-up", "mode", "same greedy tokens (fp32)"],
                 [[m, tp, label, f"{tok:,.1f}", f"{sp:.2f}x" if sp else "", mode,
                   "yes" if same else ("no" if same is False else "")]
                  for m, tp, label, tok, sp, mode, same in rows],
                 title="Batch-1 decode: tokens/s against the number of GPUs", numeric=(1, 3, 4))


def bar_figure(values: Mapping[str, float], *, title: str, yaxis: str, log: bool = False) -> go.Figure:
    """A plain bar chart (errors per check, tokens per expert, blocks per rank)."""
    fig = go.Figure(go.Bar(x=list(values), y=list(values.values())))
    fig.update_layout(title=title, yaxis={"title": yaxis, "type": "log" if log else "linear"},
                      height=350)
    return fig


def schedule_figure(events: Sequence[Mapping[str, Any]], *, title: str, theory: float | None = None) -> go.Figure:
    """A simulated schedule as a Gantt chart: one trace per step kind (fast to redraw at large p, m);
    model chunks of an interleaved schedule in lighter shades; the bubble and its formula in the title."""
    fig = go.Figure()
    v = 1 + max((e.get("chunk", 0) for e in events), default=0)
    for k, name in (("F", "forward"), ("B", "backward")):
        evs = [e for e in events if e["kind"] == k]
        if not evs:
            continue
        fig.add_trace(go.Bar(
            base=[e["start"] for e in evs], x=[e["end"] - e["start"] for e in evs],
            y=[f"rank {e['rank']}" for e in evs], orientation="h", name=name,
            marker={"color": _KIND_COLOR[k], "opacity": [1.0 - 0.5 * e.get("chunk", 0) / max(1, v - 1) if v > 1
                                                          else 1.0 for e in evs],
                    "line": {"width": 0.5, "color": "white"}},
            text=[str(e["mb"]) for e in evs], textposition="inside", insidetextanchor="middle",
            customdata=[e.get("chunk", 0) for e in evs],
            hovertemplate=f"{name} of micro-batch %{{text}}, chunk %{{customdata}}<extra></extra>"))
    ranks = sorted({e["rank"] for e in events})
    sub = f"bubble {pipeline.bubble_of(list(events)):.1%}" + (f", formula {theory:.1%}" if theory is not None else "")
    fig.update_layout(title=f"{title} ({sub})", barmode="overlay", height=140 + 36 * len(ranks),
                      xaxis={"title": "time (forward step of a whole stage = 1)"},
                      yaxis={"categoryorder": "array", "categoryarray": [f"rank {r}" for r in reversed(ranks)]},
                      margin={"t": 50, "b": 40}, legend={"orientation": "h", "y": -0.25})
    return fig


def gib_bars_figure(configs: Mapping[str, Mapping[str, float]], *, title: str,
                    capacity_bytes: float | None = None, capacity_label: str = "GPU") -> go.Figure:
    """Stacked bars of bytes per GPU by part, in GiB (2**30 bytes), with the GPU's capacity line."""
    labels = list(configs)
    parts: list[str] = []
    for c in configs.values():
        parts += [p for p in c if p not in parts]
    fig = go.Figure()
    for part in parts:
        fig.add_trace(go.Bar(x=labels, y=[configs[k].get(part, 0.0) / 2**30 for k in labels], name=part,
                             hovertemplate=f"{part}: %{{y:,.1f}} GiB<extra></extra>"))
    totals = [sum(configs[k].values()) / 2**30 for k in labels]
    fig.add_trace(go.Scatter(x=labels, y=totals, mode="text", text=[f"{t:,.1f} GiB" for t in totals],
                             textposition="top center", showlegend=False))
    top = max(totals + [capacity_bytes / 2**30 if capacity_bytes else 0.0]) * 1.18 or 1.0
    if capacity_bytes:
        fig.add_hline(y=capacity_bytes / 2**30, line={"color": "red", "dash": "dash"},
                      annotation_text=f"{capacity_label}: {capacity_bytes / 2**30:,.1f} GiB",
                      annotation_position="top right")   # clear of the first bar's total
    fig.update_layout(barmode="stack", title=title, yaxis={"title": "GiB per GPU (2^30 bytes)", "range": [0, top]},
                      height=400, legend={"orientation": "h", "y": -0.2})
    return fig


def step_time_figure(times: Mapping[str, Mapping[str, float]], *, title: str) -> go.Figure:
    """Stacked bars of a modelled decode step: reads, fixed per-layer costs, collectives (ms)."""
    labels = list(times)
    fig = go.Figure()
    for part, name in (("reads_s", "read weights and KV cache (1/tp each)"),
                       ("fixed_s", "per-layer kernel latencies (not divided)"),
                       ("comm_s", "2 all-reduces per layer + logits gather")):
        fig.add_trace(go.Bar(x=labels, y=[times[k][part] * 1e3 for k in labels], name=name))
    fig.update_layout(barmode="stack", title=title, yaxis={"title": "ms per decode step (model)"},
                      height=400, legend={"orientation": "h", "y": -0.2})
    return fig


def fit_table(rows: Sequence[Mapping[str, Any]], held: Sequence[Mapping[str, Any]] = (), *,
              title: str) -> Table:
    """Measured against modelled decode times (tp_model.predict_record rows), then the held-out
    ones (tp_model.held_out: bases fitted on another model), each row saying which it is."""
    def kind(r: Mapping[str, Any]) -> str:
        if "fitted_on" in r:
            return f"held out (bases from {r['fitted_on']})"
        return "solved exactly" if r["tp"] == 1 else "in sample"
    return Table(["model", "GPUs", "all-reduce", "measured (ms)", "model (ms)", "model error", "fit"],
                 [[r["model"], r["tp"], r["algo"], f"{r['measured_s'] * 1e3:,.3f}", f"{r['model_s'] * 1e3:,.3f}",
                   f"{r['error']:+.1%}", kind(r)] for r in [*rows, *held]],
                 title=title, numeric=(1, 3, 4, 5))


def speed_table(rows: Sequence[Mapping[str, Any]], *, title: str) -> Table:
    """TP MLP and decode rows (machine, what, GPUs, ms, speed-up) with readable numbers."""
    return Table(["machine", "what", "GPUs / ranks", "time (ms)", "speed-up"],
                 [[r["machine"], r["what"], r["GPUs / ranks"], f"{r['time (ms)']:,.3f}",
                   f"{r['speed-up']:.2f}x" if r.get("speed-up") else ""] for r in rows],
                 title=title, numeric=(2, 3, 4))
