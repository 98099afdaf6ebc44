"""Notebook 02's widgets: the loss-scale explorer and the scaler stepper.

- `LossScaleExplorer`: a format and a loss scale (power of two) over the real activation-gradient
  histogram of the course model (computed once in the notebook by `amp.activations`); the figure
  marks where values flush to zero, go subnormal or overflow, and the text gives the fractions.
  Each change only re-bins a histogram (`amp.activations.zones`): well under 0.1 s.
- `ScalerStepper`: buttons step the course's DynamicLossScaler and torch's GradScaler through clean
  steps and steps whose gradient holds inf or NaN (`amp.stepper.ScalerPair`); both scale histories
  are drawn on one figure.

Same rendering path as notebook 01's widgets: a plain plotly figure redrawn in an Output widget.
Callbacks are plain methods, so tests drive them without a browser.
"""
from __future__ import annotations

import html
from typing import Mapping

import ipywidgets as W
import plotly.graph_objects as go

from ..amp.activations import SCALE_FORMATS, zones
from ..amp.stepper import ScalerPair, explain_step
from ..plots.amp import loss_scale_figure, scaler_steps_figure
from .dtypes import redraw

__all__ = ["LossScaleExplorer", "ScalerStepper"]


class LossScaleExplorer:
    """Which activation's gradients, which format, which loss scale: the histogram and its zones."""

    def __init__(self, hists: Mapping[str, dict], fmt: str = "fp16", log2_scale: int = 0,
                 lo: int = -8, hi: int = 32) -> None:
        if not hists:
            raise ValueError("need at least one histogram (name -> amp.activations.log2_hist(...))")
        if fmt not in SCALE_FORMATS:
            raise ValueError(f"unknown format {fmt!r}; choose one of {SCALE_FORMATS}")
        if not lo <= log2_scale <= hi:
            raise ValueError(f"log2_scale {log2_scale} outside the slider's range [{lo}, {hi}]")
        self.hists = dict(hists)
        self.which = W.Dropdown(options=list(self.hists), value=next(iter(self.hists)), description="gradient of",
                                layout=W.Layout(width="320px"))
        self.format = W.Dropdown(options=list(SCALE_FORMATS), value=fmt, description="format")
        self.scale = W.IntSlider(value=log2_scale, min=lo, max=hi, description="log2 scale",
                                 continuous_update=True, layout=W.Layout(width="520px"))
        self.text = W.HTML()
        self.out = W.Output()
        self.figure: go.Figure = go.Figure()
        self.view: dict = {}
        for w in (self.which, self.format, self.scale):
            w.observe(self.update, names="value")
        self.widget = W.VBox([W.HBox([self.which, self.format]), self.scale, self.text, self.out])
        self.widget.add_class("ck-loss-scale")
        self.update()

    def update(self, change: object = None) -> None:
        """Re-bin the chosen histogram for the format and scale; redraw the figure and the text."""
        hist = self.hists[self.which.value]
        self.view = zones(hist, self.format.value, int(self.scale.value))
        v = self.view
        self.text.value = (
            f'<div class="ck-scale-text">Gradient of <b>{html.escape(self.which.value)}</b> in '
            f"<b>{v['format']}</b> with the loss multiplied by <b>2^{v['log2_scale']}</b>: "
            f'<span class="ck-underflow">{v["underflow"]:.1%} flushed to zero</span>, '
            f"{v['subnormal']:.1%} subnormal (fewer bits), {v['normal']:.1%} normal, "
            f'<span class="ck-overflow">{v["overflow"]:.1%} overflow</span>.</div>')
        self.figure = loss_scale_figure(hist, v, title=f"Gradient of {self.which.value}: {v['format']}, "
                                                       f"scale 2^{v['log2_scale']}")
        redraw(self.out, self.figure)

    def _ipython_display_(self) -> None:
        from IPython.display import display
        display(self.widget)


class ScalerStepper:
    """Buttons: a clean step, a step whose gradient holds inf, one with NaN, reset; both scalers' scales."""

    def __init__(self, init_scale: float = 2.0**16, growth_interval: int = 3) -> None:
        self.kw = dict(init_scale=init_scale, growth_interval=growth_interval)
        self.pair = ScalerPair(**self.kw)
        self.buttons = {ev: W.Button(description=label, layout=W.Layout(width="150px"))
                        for ev, label in (("clean", "clean step"), ("inf", "step with inf"),
                                          ("nan", "step with NaN"), ("reset", "reset"))}
        for ev, b in self.buttons.items():
            b.add_class(f"ck-step-{ev}")
            b.on_click(lambda _b, ev=ev: self.press(ev))
        self.text = W.HTML()
        self.out = W.Output()
        self.figure: go.Figure = go.Figure()
        self.widget = W.VBox([W.HBox(list(self.buttons.values())), self.text, self.out])
        self.widget.add_class("ck-scaler-stepper")
        self.update()

    def press(self, event: str) -> None:
        """What a button does: one step of both scalers (or a fresh pair on reset)."""
        if event == "reset":
            self.pair = ScalerPair(**self.kw)
        else:
            self.pair.step(event)
        self.update()

    def update(self) -> None:
        self.text.value = f'<div class="ck-stepper-text">{html.escape(explain_step(self.pair))}</div>'
        self.figure = scaler_steps_figure(self.pair.scales, self.pair.events)
        redraw(self.out, self.figure)

    def _ipython_display_(self) -> None:
        from IPython.display import display
        display(self.widget)
