"""Notebook 01 §7's weight-only explorer: pick a product, a format and a batch size; see its bytes,
the roofline's time and the recorded time, on the curve of time against batch.

The numbers are `dtypes.woq_roofline.point` (pure, tested) on a `course-kit bench woq` record; the
words `dtypes.woq_explain.explain_point`; the figure `plots.woq.crossing_figure`. Each change is a
few arithmetic operations and one figure, so the controls update live.
"""
from __future__ import annotations

import html

import ipywidgets as W
import plotly.graph_objects as go

from ..dtypes import woq_roofline as R
from ..dtypes.woq_explain import explain_point
from ..plots.woq import crossing_figure
from .dtypes import redraw

__all__ = ["WoqExplorer"]


class WoqExplorer:
    """Product shape, weight format and batch M over one bench woq record."""

    def __init__(self, record: dict, shape: str | None = None, fmt: str = "int4", m: int = 1) -> None:
        shapes = R.shapes(record)
        if not shapes:
            raise ValueError("this record has no product shapes (its peers did not run): nothing to explore")
        if shape is not None and shape not in shapes:
            raise ValueError(f"unknown shape {shape!r}; choose one of {shapes}")
        self.record = record
        ms = R.batches(record)
        if m not in ms:
            raise ValueError(f"batch {m} is not one of {ms}")
        self.shape = W.Dropdown(options=shapes, value=shape or shapes[0], description="product",
                                layout=W.Layout(width="360px"))
        self.format = W.ToggleButtons(options=list(R.FORMATS), value=fmt, description="weights")
        self.m = W.SelectionSlider(options=ms, value=m, description="batch M", continuous_update=False)
        self.text = W.HTML()
        self.out = W.Output()
        self.figure: go.Figure = go.Figure()
        self.point: dict = {}
        for w in (self.shape, self.format, self.m):
            w.observe(self.update, names="value")
        self.widget = W.VBox([W.HBox([self.shape, self.format]), self.m, self.text, self.out])
        self.widget.add_class("ck-woq-explorer")
        self.update()

    def update(self, change: object = None) -> None:
        """Recompute the chosen point and redraw the curve with it marked."""
        self.point = R.point(self.record, self.shape.value, self.format.value, int(self.m.value))
        text = explain_point(self.point)
        self.text.value = f'<div class="ck-woq-text">{html.escape(text)}</div>'
        self.figure = crossing_figure(self.record, self.shape.value, chosen=self.point)
        redraw(self.out, self.figure)

    def _ipython_display_(self) -> None:
        from IPython.display import display
        display(self.widget)
