"""Notebook 00's roofline explorer: pick an operation, its size and dtype; see its arithmetic intensity
and where it sits under the measured ceilings of this machine and of the reference GPU.

The computation is `course_kit.roofline.ceilings.op_cost` and `place` (pure, tested); each change costs a few
arithmetic operations and one figure. Same rendering path as notebook 01's widgets.
"""
from __future__ import annotations

import html
from typing import Optional

import ipywidgets as W
import plotly.graph_objects as go

from ..plots.roofline import explorer_figure
from ..roofline.ceilings import DTYPE_BYTES, OPS, explain_place, op_cost, place
from .dtypes import redraw

__all__ = ["RooflineExplorer"]


def _ceilings(record: dict) -> tuple[float, dict[str, float]]:
    s = record["summary"]
    return float(s["copy_gbs"]), dict(s["matmul_tflops"])


class RooflineExplorer:
    """Op, log2 of its size, dtype, and batch (for matrix-vector); the roofs of one or two machines."""

    def __init__(self, own: dict, ref: Optional[dict] = None, op: str = "matrix-vector (decode, n x n weights)",
                 log2_n: int = 12, dtype: str = "bf16", batch: int = 1,
                 own_name: str = "this machine", ref_name: str = "reference GPU") -> None:
        if op not in OPS:
            raise ValueError(f"unknown op {op!r}; choose one of {list(OPS)}")
        if not 4 <= log2_n <= 16:
            raise ValueError(f"log2_n must be in [4, 16], got {log2_n}")
        self.machines = {own_name: _ceilings(own)}
        if ref is not None:
            self.machines[ref_name] = _ceilings(ref)
        self.op = W.Dropdown(options=list(OPS), value=op, description="operation", layout=W.Layout(width="420px"))
        self.log2_n = W.IntSlider(value=log2_n, min=4, max=16, description="log2 n", continuous_update=True)
        self.dtype = W.Dropdown(options=[d for d in DTYPE_BYTES if d != "tf32"], value=dtype, description="dtype")
        self.batch = W.IntSlider(value=batch, min=1, max=256, description="batch", continuous_update=False)
        self.text = W.HTML()
        self.out = W.Output()
        self.figure: go.Figure = go.Figure()
        self.cost: dict = {}
        self.places: dict = {}
        for w in (self.op, self.log2_n, self.dtype, self.batch):
            w.observe(self.update, names="value")
        self.widget = W.VBox([self.op, W.HBox([self.log2_n, self.dtype, self.batch]), self.text, self.out])
        self.widget.add_class("ck-roofline-explorer")
        self.update()

    def update(self, change: object = None) -> None:
        """Recompute the op's cost and its place under each machine's roofs; redraw."""
        self.batch.disabled = not self.op.value.startswith("matrix-vector")
        self.cost = op_cost(self.op.value, 2 ** int(self.log2_n.value), self.dtype.value,
                            int(self.batch.value) if not self.batch.disabled else 1)
        self.places = {name: place(self.cost, bw, ceil) for name, (bw, ceil) in self.machines.items()}
        names = list(self.machines)
        text = explain_place(self.cost, self.places[names[0]], self.places.get(names[1]) if len(names) > 1 else None,
                             here_name=names[0], ref_name=names[1] if len(names) > 1 else "")
        self.text.value = f'<div class="ck-roofline-text">{html.escape(text).replace("**", "")}</div>'
        self.figure = explorer_figure(self.cost, {n: (*self.machines[n], self.places[n]) for n in names})
        redraw(self.out, self.figure)

    def _ipython_display_(self) -> None:
        from IPython.display import display
        display(self.widget)
