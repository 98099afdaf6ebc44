"""Notebook 09's memory and time widgets.

- `TPTradeoff`: tensor parallelism for a large model: GiB per GPU (course_kit.dtypes.memory) and a decode
  step's modelled time (course_kit.parallel.tp_model, fitted on the 1- and 2-GPU records) at
  TP 1, 2, 4, 8, with the all-reduce algorithm, hop latency and bus bandwidth as controls.
- `ZeroMemory`: data parallelism's training state per GPU at ZeRO stages 0-3
  (course_kit.parallel.zero.zero_bytes_per_gpu).
"""
from __future__ import annotations

import html

import ipywidgets as W
import plotly.graph_objects as go

from ..dtypes.memory import PRESETS

from ..parallel import tp_model, zero
from ..plots.parallel import gib_bars_figure, step_time_figure
from .dtypes import redraw

__all__ = ["TPTradeoff", "ZeroMemory", "tradeoff"]

TP_DEGREES = (1, 2, 4, 8)
# used only when no record is at hand; the notebook passes tp_model.fit_costs(record)
FALLBACK = tp_model.DecodeCosts(hbm_Bps=4.0e12, per_layer_s=100e-6, ring_base_s=7e-6,
                                one_shot_base_s=7e-6, source="illustrative defaults (no record)")


def tradeoff(model: str = "70b", seq: int = 8192, batch: int = 1, weights_dtype: str = "bf16",
             costs: tp_model.DecodeCosts = FALLBACK, algo: str = "ring", tps=TP_DEGREES) -> dict[str, dict]:
    """tp_model.tradeoff with the widget's defaults."""
    return tp_model.tradeoff(model, costs, seq, batch, weights_dtype, algo, tuple(tps))


FIGURE_PX = 500     # each of TPTradeoff's two figures (issue 42: a 1,100 px notebook column)


class TPTradeoff:
    """Controls for the model, context, batch, algorithm and link; bars of GiB per GPU and of the
    modelled step time, and a computed readout."""

    def __init__(self, model: str = "70b", seq: int = 8192, batch: int = 1,
                 costs: tp_model.DecodeCosts = FALLBACK, capacity_bytes: float = tp_model.H200_GIB * 2**30,
                 capacity_label: str = "H200") -> None:
        if model not in PRESETS:
            raise ValueError(f"unknown model {model!r}; choose one of {list(PRESETS)}")
        self.costs0, self.capacity, self.capacity_label = costs, capacity_bytes, capacity_label
        self.model = W.Dropdown(options=[(f"{k}: {v.name}", k) for k, v in PRESETS.items()],
                                value=model, description="model")
        self.dtype = W.Dropdown(options=["bf16", "fp8", "int4"], value="bf16", description="weights")
        self.algo = W.ToggleButtons(options=[("ring (NCCL)", "ring"), ("one-shot", "one_shot")],
                                    value="ring", description="all-reduce")
        self.seq = W.IntSlider(value=seq, min=0, max=131072, step=1024, description="context",
                               continuous_update=False)
        self.batch = W.IntSlider(value=batch, min=1, max=64, description="batch", continuous_update=False)
        self.hop = W.FloatLogSlider(value=max(costs.hop_s * 1e6, 0.01), base=10, min=-2, max=1.5, step=0.05,
                                    description="hop µs", continuous_update=False)
        self.busbw = W.FloatLogSlider(value=costs.busbw_Bps / 1e9, base=10, min=0, max=3, step=0.05,
                                      description="busbw GB/s", continuous_update=False)
        self.text = W.HTML()
        self.out_mem, self.out_time = W.Output(), W.Output()
        self.figures: dict[str, go.Figure] = {}
        self.result: dict[str, dict] = {}
        for w in (self.model, self.dtype, self.algo, self.seq, self.batch, self.hop, self.busbw):
            w.observe(self.update, names="value")
        self.widget = W.VBox([W.HBox([self.model, self.dtype]), self.algo, W.HBox([self.seq, self.batch]),
                              W.HBox([self.hop, self.busbw]), self.text,
                              # side by side where the column is wide enough, one above the other if not
                              W.HBox([self.out_mem, self.out_time], layout=W.Layout(flex_flow="row wrap"))])
        self.update()

    def costs(self) -> tp_model.DecodeCosts:
        from dataclasses import replace
        return replace(self.costs0, hop_s=self.hop.value * 1e-6, busbw_Bps=self.busbw.value * 1e9)

    def update(self, change: object = None) -> None:
        """Recompute memory and time at every TP degree; redraw."""
        self.result = tradeoff(self.model.value, self.seq.value, self.batch.value, self.dtype.value,
                               self.costs(), self.algo.value)
        name = PRESETS[self.model.value].name
        lines = tp_model.explain_tradeoff(self.result, self.capacity, self.batch.value)
        self.text.value = (f"<b>{html.escape(name)}</b> (memory in GiB, 2<sup>30</sup> bytes; times from "
                           f"{html.escape(self.costs0.source)})<ul>"
                           + "".join(f"<li>{html.escape(x).replace('**', '')}</li>" for x in lines) + "</ul>")
        self.figures = {
            "memory": gib_bars_figure(self.result["memory"], title=f"{name}: memory per GPU",
                                      capacity_bytes=self.capacity, capacity_label=self.capacity_label),
            "time": step_time_figure(self.result["time"], title=f"{name}: one decode step (model)"),
        }
        for fig in self.figures.values():      # two of them fit a 1,100 px column side by side
            fig.update_layout(width=FIGURE_PX)
        redraw(self.out_mem, self.figures["memory"])
        redraw(self.out_time, self.figures["time"])

    def _ipython_display_(self) -> None:
        from IPython.display import display
        display(self.widget)


class ZeroMemory:
    """Training state per GPU (mixed-precision Adam, 16 bytes per parameter) at ZeRO stages 0-3."""

    def __init__(self, model: str = "70b", gpus: int = 8, capacity_bytes: float = tp_model.H200_GIB * 2**30,
                 capacity_label: str = "H200") -> None:
        if model not in PRESETS:
            raise ValueError(f"unknown model {model!r}; choose one of {list(PRESETS)}")
        self.capacity, self.capacity_label = capacity_bytes, capacity_label
        self.model = W.Dropdown(options=[(f"{k}: {v.name}", k) for k, v in PRESETS.items()],
                                value=model, description="model")
        self.gpus = W.SelectionSlider(options=[1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024], value=gpus,
                                      description="DP GPUs", continuous_update=False)
        self.text = W.HTML()
        self.out = W.Output()
        self.figure: go.Figure | None = None
        self.result: dict[str, dict[str, float]] = {}
        for w in (self.model, self.gpus):
            w.observe(self.update, names="value")
        self.widget = W.VBox([W.HBox([self.model, self.gpus]), self.text, self.out])
        self.update()

    def update(self, change: object = None) -> None:
        n_params = PRESETS[self.model.value].n_params()
        self.result = zero.stages_table(n_params, self.gpus.value)
        lines = zero.explain_stages(self.result, self.capacity)
        self.text.value = ("<ul>" + "".join(f"<li>{html.escape(x)}</li>" for x in lines) + "</ul>")
        self.figure = gib_bars_figure(self.result, title=f"{PRESETS[self.model.value].name}: training state per "
                                                         f"GPU over {self.gpus.value} GPUs (activations not counted)",
                                      capacity_bytes=self.capacity, capacity_label=self.capacity_label)
        redraw(self.out, self.figure)

    def _ipython_display_(self) -> None:
        from IPython.display import display
        display(self.widget)


