"""Tensor parallelism's trade-off for a large model: memory per GPU against time per token.

Left, from course_kit.memory: the bytes each GPU holds (weights and KV cache) at TP 1, 2, 4, 8.
Right, from the alpha-beta model (course_kit.parallel.comm.tp_decode_step): a decode step's time,
the weight reads shrinking as 1/tp while the two all-reduces per layer do not.
"""
from __future__ import annotations

import html

import ipywidgets as W
import plotly.graph_objects as go

from ..memory import GB, PRESETS, per_gpu_bytes
from ..parallel.comm import tp_decode_step
from ..plots.memory import breakdown_figure
from .dtypes import redraw

__all__ = ["TPTradeoff", "tradeoff"]

TP_DEGREES = (1, 2, 4, 8)


def tradeoff(model: str = "70b", seq: int = 8192, batch: int = 1, weights_dtype: str = "bf16",
             hbm_GBps: float = 4800.0, alpha_us: float = 3.0, busbw_GBps: float = 350.0,
             tps=TP_DEGREES) -> dict[str, dict]:
    """{"memory": {"TP=t": parts}, "time": {"TP=t": step model}} for each TP degree."""
    if model not in PRESETS:
        raise ValueError(f"unknown model {model!r}; choose one of {list(PRESETS)}")
    shape = PRESETS[model]
    memory = {f"TP={t}": per_gpu_bytes(model, t, weights_dtype=weights_dtype, seq=seq, batch=batch)
              for t in tps}
    time = {f"TP={t}": tp_decode_step(memory[f"TP={t}"]["weights"] * t, shape.hidden, shape.layers,
                                      t, batch, hbm_GBps * 1e9, alpha_us * 1e-6, busbw_GBps * 1e9)
            for t in tps}
    return {"memory": memory, "time": time}


def time_figure(times: dict[str, dict[str, float]], title: str) -> go.Figure:
    labels = list(times)
    fig = go.Figure()
    for part, name in (("weights_s", "read weights (1/tp each)"), ("all_reduce_s", "2 all-reduces per layer")):
        fig.add_trace(go.Bar(x=labels, y=[times[k][part] * 1e3 for k in labels], name=name))
    fig.update_layout(barmode="stack", title=title, yaxis={"title": "ms per decode step (model)"},
                      height=400)
    return fig


class TPTradeoff:
    """Sliders for the context, batch and link; bars of memory per GPU and modelled step time."""

    def __init__(self, model: str = "70b", seq: int = 8192, batch: int = 1, gpu_gb: float = 141.0,
                 busbw_GBps: float = 350.0, alpha_us: float = 3.0) -> None:
        if model not in PRESETS:
            raise ValueError(f"unknown model {model!r}; choose one of {list(PRESETS)}")
        self.gpu_gb = gpu_gb
        self.model = W.Dropdown(options=[(f"{k}: {v.name}", k) for k, v in PRESETS.items()],
                                value=model, description="model")
        self.dtype = W.Dropdown(options=["bf16", "fp8", "int4"], value="bf16", description="weights")
        self.seq = W.IntSlider(value=seq, min=0, max=131072, step=1024, description="context",
                               continuous_update=False)
        self.batch = W.IntSlider(value=batch, min=1, max=64, description="batch",
                                 continuous_update=False)
        self.busbw = W.FloatLogSlider(value=busbw_GBps, base=10, min=0, max=3, step=0.05,
                                      description="busbw GB/s", continuous_update=False)
        self.alpha = W.FloatLogSlider(value=alpha_us, base=10, min=0, max=2, step=0.05,
                                      description="alpha µs", continuous_update=False)
        self.text = W.HTML()
        self.out_mem, self.out_time = W.Output(), W.Output()
        self.figures: dict[str, go.Figure] = {}
        self.result: dict[str, dict] = {}
        for w in (self.model, self.dtype, self.seq, self.batch, self.busbw, self.alpha):
            w.observe(self.update, names="value")
        self.widget = W.VBox([W.HBox([self.model, self.dtype]), W.HBox([self.seq, self.batch]),
                              W.HBox([self.busbw, self.alpha]), self.text,
                              W.HBox([self.out_mem, self.out_time])])
        self.update()

    def update(self, change: object = None) -> None:
        """Recompute memory and time at every TP degree; redraw."""
        self.result = tradeoff(self.model.value, self.seq.value, self.batch.value, self.dtype.value,
                               alpha_us=self.alpha.value, busbw_GBps=self.busbw.value)
        name = PRESETS[self.model.value].name
        items = []
        for label, parts in self.result["memory"].items():
            total = sum(parts.values()) / GB
            step = self.result["time"][label]["total_s"]
            fits = "fits" if total <= self.gpu_gb else "does not fit"
            items.append(f"<li>{label}: <b>{total:.1f} GB</b> per GPU ({fits} in {self.gpu_gb:g} GB),"
                         f" about <b>{self.batch.value / step:,.0f} tokens/s</b> (model)</li>")
        self.text.value = f"<b>{html.escape(name)}</b><ul>{''.join(items)}</ul>"
        self.figures = {
            "memory": breakdown_figure(self.result["memory"], title=f"{name}: memory per GPU",
                                       capacity_gb=self.gpu_gb, capacity_label="H200"),
            "time": time_figure(self.result["time"], f"{name}: one decode step (alpha-beta model)"),
        }
        redraw(self.out_mem, self.figures["memory"])
        redraw(self.out_time, self.figures["time"])

    def _ipython_display_(self) -> None:
        from IPython.display import display
        display(self.widget)
