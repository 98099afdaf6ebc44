"""The slider-driven overflow explorer and the operation explorer (ipywidgets + plotly).

Rendering path: each update builds a plain plotly figure (a pure function in
course_kit.plots.dtypes) and puts its display data into an ipywidgets Output widget. Plotly's FigureWidget
would need anywidget in JupyterLab 4 and a custom widget manager on Colab; a plain figure shown in
an Output widget renders with plotly's ordinary renderers in JupyterLab, VS Code and Colab alike.
Callbacks are plain methods: tests set a slider's value and read .figure and .table.value.
"""
from __future__ import annotations

import html
import json
import math
from typing import Optional, Sequence

import ipywidgets as W
import plotly.graph_objects as go

from ..dtypes import FORMAT_NAMES, Rounding, classify, get_format
from ..dtypes import ops as dops
from ..plots.dtypes import FIELD_COLORS, explorer_figure, ops_figure

__all__ = ["OverflowExplorer", "OpExplorer", "table_html", "redraw", "figure_bundle"]


def figure_bundle(fig: go.Figure) -> dict:
    """The display data of a plotly figure: plotly's own mime type (rendered by JupyterLab's
    plotly extension), HTML that loads plotly.js from its CDN (for front ends without the
    extension, such as Colab), and plain text."""
    spec = json.loads(fig.to_json())                      # JSON-safe data and layout
    spec["config"] = {"displaylogo": False, "responsive": True}   # follows its column when the page resizes
    title = fig.layout.title.text or "figure"
    return {"application/vnd.plotly.v1+json": spec,
            "text/html": fig.to_html(full_html=False, include_plotlyjs="cdn",
                                     config=spec["config"]),
            "text/plain": f"<plotly figure: {title}>"}


def redraw(out: W.Output, fig: go.Figure) -> None:
    """Replace what the Output widget shows with the figure (only inside a kernel).

    The display data is written into the widget's `outputs` in one assignment: one comm message,
    no flicker, and no `with out:` output capture, whose message routing papermill's executor
    (nbclient) can wait on forever.
    """
    try:
        from IPython import get_ipython
    except ImportError:                     # pragma: no cover - IPython ships with ipywidgets
        return
    if get_ipython() is None:              # headless (tests): the figure is kept on the object
        return
    out.outputs = ({"output_type": "display_data", "data": figure_bundle(fig), "metadata": {}},)


def _bits_html(r: Rounding) -> str:
    f = r.fields
    kind = "mantissa" if get_format(r.format).kind == "float" else "integer"
    spans = [(f.sign, "sign"), (f.exponent, "exponent"), (f.mantissa, kind)]
    return "".join(f'<span style="color:{FIELD_COLORS[k]};font-weight:bold">{b}</span>'
                   for b, k in spans if b)


def _fmt(v: float) -> str:
    return f"{v:.7g}" if math.isfinite(v) or math.isnan(v) else ("inf" if v > 0 else "-inf")


def _stored(r: Rounding) -> str:
    """The stored value as text: integers as integers (0, never '-0'), floats with 7 digits."""
    if get_format(r.format).kind != "float" and math.isfinite(r.stored):
        return str(int(r.stored) + 0)
    return _fmt(r.stored)


_CELL = "padding:2px 12px;text-align:left;border-bottom:1px solid #ddd"   # cells never run together


def table_html(x: float, results: Sequence[Rounding], selected: Optional[str] = None) -> str:
    """The side-by-side table: stored value, coloured bits, relative error, outcome."""
    rows = []
    for r in results:
        style = ' style="background:#fff3cd"' if r.format == selected else ""
        rel = "-" if math.isnan(r.rel_error) else f"{r.rel_error:.2e}"
        rows.append(
            f'<tr{style} data-format="{r.format}"><td style="{_CELL}">{r.format}</td>'
            f'<td class="ck-stored" style="{_CELL}">{_stored(r)}</td>'
            f'<td style="{_CELL};font-family:monospace">{_bits_html(r)}</td>'
            f'<td style="{_CELL}">{rel}</td><td class="ck-outcome" style="{_CELL}">{html.escape(r.outcome)}</td></tr>')
    head = "".join(f'<th style="{_CELL}">{h}</th>' for h in
                   ("format", "stored value", "bits (sign | exponent | mantissa)", "relative error", "outcome"))
    return (f'<div class="ck-explorer-table"><b>x = {_fmt(x)}</b>'
            f'<table style="border-collapse:collapse"><tr>{head}</tr>{"".join(rows)}</table></div>')


def _check_bounds(lo: float, hi: float) -> None:
    for name, v in (("lo", lo), ("hi", hi)):
        if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise ValueError(f"slider bound {name}={v!r} must be a finite number > 0 "
                             "(magnitudes on a log scale)")
    if lo >= hi:
        raise ValueError(f"slider bounds need lo < hi, got lo={lo!r}, hi={hi!r}")


class OverflowExplorer:
    """A log-scale magnitude slider, a sign toggle and a format selector; for every format
    the stored value, coloured bits, relative error and outcome, and a range figure."""

    def __init__(self, value: float = 1000.0, fmt: str = "fp8_e4m3fn", *, lo: float = 1e-10,
                 hi: float = 1e40, formats: Sequence[str] = FORMAT_NAMES) -> None:
        _check_bounds(lo, hi)
        self.formats = [get_format(f).name for f in formats]
        fmt = get_format(fmt).name
        if fmt not in self.formats:
            raise ValueError(f"format {fmt!r} is not among the explorer's {self.formats}")
        if not lo <= abs(value) <= hi:
            raise ValueError(f"value {value!r} outside the slider's range [{lo:g}, {hi:g}]")
        self.slider = W.FloatLogSlider(
            value=abs(value), base=10, min=math.log10(lo), max=math.log10(hi), step=0.01,
            description="|x|", readout_format=".4g", continuous_update=True,
            layout=W.Layout(width="640px"))
        self.sign = W.ToggleButtons(options=["+", "-"], value="-" if value < 0 else "+",
                                    description="sign", style={"button_width": "40px"})
        self.format = W.Dropdown(options=self.formats, value=fmt, description="format")
        self.table = W.HTML()
        self.out = W.Output()
        self.figure: go.Figure = go.Figure()
        self.results: list[Rounding] = []
        for w in (self.slider, self.sign, self.format):
            w.observe(self.update, names="value")
        self.widget = W.VBox([W.HBox([self.slider, self.sign]), self.format, self.table,
                              self.out])
        self.widget.add_class("ck-overflow-explorer")
        self.update()

    @property
    def x(self) -> float:
        return -self.slider.value if self.sign.value == "-" else self.slider.value

    def update(self, change: object = None) -> None:
        """Recompute every format's rounding, the table and the figure (the slider callback)."""
        x = self.x
        self.results = [classify(x, f) for f in self.formats]
        self.table.value = table_html(x, self.results, self.format.value)
        self.figure = explorer_figure(x, self.results, self.format.value)
        redraw(self.out, self.figure)

    def _ipython_display_(self) -> None:
        from IPython.display import display
        display(self.widget)


_OP_RANGES = {  # op -> (slider kind, min, max, default)
    "square": ("log", -2.0, 4.0, 300.0),
    "exp": ("lin", -120.0, 120.0, 12.0),
    "sum": ("log", -3.0, 3.0, 1.0),
    "softmax": ("lin", 0.0, 100.0, 30.0),
}


class OpExplorer:
    """Pick an operation and x (and n for sums and softmax); see each format's result, its error
    against float64, and the error curve along the operation's sweep."""

    def __init__(self, op: str = "exp", x: Optional[float] = None, n: int = 1000) -> None:
        if op not in dops.OPS:
            raise ValueError(f"unknown operation {op!r}; choose one of {list(dops.OPS)}")
        self.op = W.Dropdown(options=list(dops.OPS), value=op, description="operation")
        self.n = W.IntSlider(value=n, min=2, max=10_000, step=1, description="n",
                             continuous_update=False)
        self.x_log = W.FloatLogSlider(base=10, min=-3, max=4, value=1.0, step=0.01,
                                      description="x", readout_format=".4g",
                                      continuous_update=False)
        self.x_lin = W.FloatSlider(min=-120, max=120, value=12.0, step=0.5, description="x",
                                   continuous_update=False)
        self.n_note = W.HTML()        # why n is greyed out, where it is
        self.n_note.add_class("ck-ops-n-note")
        self.table = W.HTML()
        self.out = W.Output()
        self.figure: go.Figure = go.Figure()
        self.results: list[dops.OpResult] = []
        self._quiet = False
        self._configure(op, x)
        self.op.observe(self._on_op, names="value")
        for w in (self.n, self.x_log, self.x_lin):
            w.observe(self.update, names="value")
        self.widget = W.VBox([W.HBox([self.op, self.n]), self.n_note, self.x_log, self.x_lin, self.table,
                              self.out])
        self.update()

    def _configure(self, op: str, x: Optional[float]) -> None:
        kind, lo, hi, default = _OP_RANGES[op]
        value = default if x is None else float(x)
        log = kind == "log"
        slider = self.x_log if log else self.x_lin
        self._quiet = True                  # one redraw after reconfiguring, not one per trait
        try:
            slider.min, slider.max = min(lo, slider.min), max(hi, slider.max)
            slider.value = value
            slider.min, slider.max = lo, hi
        finally:
            self._quiet = False
        self.x_log.layout.display = None if log else "none"
        self.x_lin.layout.display = "none" if log else None
        self.n.disabled = op not in ("sum", "softmax")
        self.n_note.value = ("" if not self.n.disabled else
                             f"<i>n is off: {html.escape(dops.OPS[op])} takes x alone; n counts the terms of "
                             "sum and the logits of softmax.</i>")

    def _on_op(self, change: dict) -> None:
        self._configure(change["new"], None)
        self.update()

    @property
    def x(self) -> float:
        return self.x_log.value if _OP_RANGES[self.op.value][0] == "log" else self.x_lin.value

    def update(self, change: object = None) -> None:
        """Recompute the three formats' results, the table and the figure."""
        if self._quiet:
            return
        op, x, n = self.op.value, self.x, self.n.value
        self.results = [dops.evaluate(op, x, f, n=n) for f in dops.OP_FORMATS]
        ref = self.results[0].reference
        rows = "".join(
            f'<tr><td style="{_CELL}">{r.format}</td><td style="{_CELL}">{_fmt(r.value)}</td>'
            f'<td style="{_CELL}">{_fmt(r.rel_error)}</td>'
            f'<td class="ck-outcome" style="{_CELL}">{r.outcome}</td></tr>' for r in self.results)
        self.table.value = (f"<b>{html.escape(dops.OPS[op])}, x = {x:.4g}"
                            f"{f', n = {n}' if op in ('sum', 'softmax') else ''}</b>; "
                            f'float64 reference {_fmt(ref)}<table style="border-collapse:collapse"><tr>'
                            + "".join(f'<th style="{_CELL}">{h}</th>' for h in
                                      ("format", "result", "relative error", "outcome")) + "</tr>"
                            f"{rows}</table>")
        self.figure = ops_figure(op, x, n)
        redraw(self.out, self.figure)

    def _ipython_display_(self) -> None:
        from IPython.display import display
        display(self.widget)
