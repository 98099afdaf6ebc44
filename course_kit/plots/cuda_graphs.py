"""Figures of notebook 05 (CUDA graphs), from `course-kit bench cuda_graphs` records."""
from __future__ import annotations

import plotly.graph_objects as go

VARIANTS = {"eager": "eager step", "graph": "CUDA graph runner", "fused_graph": "fused blocks + graph runner",
            "triton_graph": "Triton kernels + graph runner",
            "reduce_overhead": 'torch.compile("reduce-overhead")', "hf_generate": "HF generate"}


def launch_figure(records: list[tuple[str, dict]]) -> go.Figure:
    """µs per kernel launched eagerly against µs per kernel inside one graph replay."""
    fig = go.Figure()
    for label, rec in records:
        row = next((r for r in rec["results"] if r.get("name") == "launch"), None)
        if row is None:
            continue
        names, values = ["eager launch"], [row["eager_us_per_kernel"]]
        if row.get("graph_us_per_kernel"):
            names.append("inside a graph replay")
            values.append(row["graph_us_per_kernel"])
        fig.add_bar(x=names, y=values, name=label, text=[f"{v:.2f} µs" for v in values], textposition="outside")
    fig.update_layout(barmode="group", yaxis_title="µs per tiny kernel", height=380,
                      title="Launch overhead: N tiny kernels, eager against one graph replay")
    return fig


def decode_rows(record: dict, preset: str | None = None) -> list[dict]:
    """The per-batch decode rows of a record (optionally of one preset)."""
    return [r for r in record["results"] if r.get("variant") in VARIANTS and "batch" in r
            and (preset is None or r.get("preset") == preset)]


def decode_figure(records: list[tuple[str, dict]], preset: str | None = None) -> go.Figure:
    """Decode tokens/s against batch size, one line per variant (and per record)."""
    fig = go.Figure()
    for label, rec in records:
        p = preset or rec["summary"].get("decode_bytes", {}).get("preset")
        rows = decode_rows(rec, p)
        for variant, name in VARIANTS.items():
            pts = sorted((r["batch"], r["tokens_per_s"]) for r in rows if r["variant"] == variant)
            if pts:
                fig.add_scatter(x=[b for b, _ in pts], y=[t for _, t in pts], name=f"{name} · {label}",
                                mode="lines+markers")
    fig.update_layout(xaxis_title="batch size", yaxis_title="tokens/s", yaxis_type="log", xaxis_type="log",
                      height=420, title=f"Decode throughput by batch size ({preset or 'model of the record'})")
    return fig


def roofline_decode_figure(record: dict, copy_gbs: float | None = None) -> go.Figure:
    """Decode tokens/s against the bandwidth ceiling: at batch b one step must read the weights once
    and b rows of K/V, so tokens/s <= b * bandwidth / (weights + b * kv_row)."""
    nb = record["summary"].get("decode_bytes")
    bw = copy_gbs or record["summary"].get("copy_gbs")
    fig = decode_figure([("", record)])
    if nb and bw:
        batches = sorted({r["batch"] for r in decode_rows(record, nb["preset"])})
        ceiling = [b * bw * 1e9 / (nb["weights"] + b * nb["kv_per_row"]) for b in batches]
        fig.add_scatter(x=batches, y=ceiling, name=f"bandwidth ceiling ({bw:,.0f} GB/s copy)",
                        mode="lines", line=dict(dash="dash", color="black"))
    fig.update_layout(title="Decode against the bandwidth roofline (dashed: reading the bytes takes this long)")
    return fig


def decode_forms_figure(record: dict, preset: str = "llama-1b") -> go.Figure:
    """The batch-1 step in each of its forms (one change at a time, as the bench builds them): ms per
    token, with the time reading the step's bytes once at the run's copy bandwidth would take."""
    from course_kit.cuda_graphs.explain import BIG_FORM_WORDS
    rows = {r["variant"]: r for r in record["results"] if r.get("preset") == preset and r.get("batch") == 1
            and r.get("variant") in BIG_FORM_WORDS}
    forms = [f for f in BIG_FORM_WORDS if f in rows]
    fig = go.Figure()
    fig.add_bar(x=[BIG_FORM_WORDS[f] for f in forms], y=[rows[f]["ms_per_step"] for f in forms],
                text=[f"{rows[f]['ms_per_step']:.3f} ms" for f in forms], textposition="outside", name="ms per token")
    copy = record["summary"].get("copy_gbs")
    nbytes = next((rows[f].get("bytes_per_token") for f in forms if rows[f].get("bytes_per_token")), None)
    if copy and nbytes and forms:
        floor = nbytes / copy / 1e6
        fig.add_hline(y=floor, line_dash="dash", line_color="black",
                      annotation_text=f"reading {nbytes / 1e9:.2f} GB at {copy:,.0f} GB/s: {floor:.3f} ms")
    fig.update_layout(yaxis_title="ms per token (batch 1)", height=420, showlegend=False,
                      title=f"{preset} decode step, one change at a time")
    return fig


def padding_figure(plan: list[dict]) -> go.Figure:
    """Real rows and padding rows for each batch, replayed on the next captured graph."""
    xs = [str(p["batch"]) for p in plan]
    fig = go.Figure([go.Bar(x=xs, y=[p["batch"] for p in plan], name="real rows"),
                     go.Bar(x=xs, y=[p["padding"] for p in plan], name="padding rows",
                            text=[f"graph {p['graph']}" for p in plan], textposition="outside")])
    fig.update_layout(barmode="stack", xaxis_title="batch that arrives", yaxis_title="rows computed",
                      height=360, title="Padding a batch up to the next captured graph size")
    return fig


def pitfalls_table(pitfalls: list[dict]) -> go.Figure:
    """One row per pitfall: what goes wrong, the fix, and what the demonstration found."""
    def found(p):
        rest = {k: v for k, v in p.items() if k not in ("pitfall", "what goes wrong", "fix")}
        return "<br>".join(f"{k}: {v}" for k, v in rest.items()) or "(explanation only: no GPU)"
    fig = go.Figure(go.Table(
        columnwidth=[1.2, 3, 3, 3],
        header=dict(values=["pitfall", "what goes wrong", "fix", "demonstrated"], align="left"),
        cells=dict(values=[[p["pitfall"] for p in pitfalls], [p.get("what goes wrong", "") for p in pitfalls],
                           [p.get("fix", "") for p in pitfalls], [found(p) for p in pitfalls]], align="left")))
    fig.update_layout(height=520, margin=dict(t=10, b=10))
    return fig


def buckets_figure(cost: dict, source: str = "") -> go.Figure:
    """Notebook 05's bucket widget: per step, real and padding rows (the trace), and the trace's
    total time stepped eagerly against replayed from the chosen buckets (step times from `source`)."""
    from plotly.subplots import make_subplots
    steps = cost["steps"]
    xs = list(range(len(steps)))
    fig = make_subplots(rows=1, cols=2, column_widths=[0.72, 0.28], horizontal_spacing=0.1,
                        subplot_titles=(f"rows per decode step (buckets {cost['sizes']})",
                                        "time for the trace (ms)"))
    fig.add_bar(x=xs, y=[s["batch"] for s in steps], name="real rows", marker_color="#1f77b4", row=1, col=1)
    fig.add_bar(x=xs, y=[s["padding"] for s in steps], name="padding rows", marker_color="#ff7f0e", row=1, col=1)
    fig.add_bar(x=["eager", "replay"], y=[cost["eager_ms"], cost["replay_ms"]], marker_color=["#7f7f7f", "#2ca02c"],
                text=[f"{cost['eager_ms']:,.0f}", f"{cost['replay_ms']:,.0f}"], textposition="outside",
                showlegend=False, row=1, col=2)
    fig.update_layout(barmode="stack", height=380, bargap=0.05, margin=dict(t=50, b=40, l=10, r=10),
                      legend=dict(orientation="h", y=-0.15),
                      title=dict(text=f"step times: {source}" if source else "", font=dict(size=12), x=0.99,
                                 xanchor="right", y=0.02, yanchor="bottom"))
    fig.update_xaxes(title_text="decode step", row=1, col=1)
    fig.update_yaxes(title_text="rows", row=1, col=1)
    fig.update_yaxes(range=[0, 1.2 * max(cost["eager_ms"], cost["replay_ms"], 1e-9)], row=1, col=2)
    return fig
