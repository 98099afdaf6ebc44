"""Notebook 03's compile break-even widget: a workload (the chain measured live in this run, or a
step from the reference record), a mode and a number of calls; the total time of eager and of the
mode with its compile time, the break-even point, and the sentence saying which is ahead.

Each change only evaluates `compile_modes.breakeven` on recorded numbers (no compiling): well under
0.1 s. Same rendering path as notebook 01's widgets.
"""
from __future__ import annotations

import html
import math
from typing import Mapping, Sequence

import ipywidgets as W
import plotly.graph_objects as go

from ..compile_modes.breakeven import break_even_calls, explain_breakeven
from ..plots.compile_modes import breakeven_figure
from .dtypes import redraw

__all__ = ["BreakEven"]


class BreakEven:
    """workloads: {name: rows}, each row a dict with "mode", "steady_s" and "compile_s" (eager among them)."""

    def __init__(self, workloads: Mapping[str, Sequence[Mapping]], calls: int = 1000) -> None:
        self.workloads = {}
        for name, rows in workloads.items():
            by = {}
            for r in rows:
                if r.get("steady_s"):
                    key = r["mode"] + (" (static inputs)" if r.get("static_inputs") else "")
                    by[key] = dict(r, mode=key)
            if "eager" in by and len(by) > 1:
                self.workloads[name] = by
        if not self.workloads:
            raise ValueError("need at least one workload with an eager row and one compiled mode")
        if not 1 <= calls <= 10**9:
            raise ValueError(f"calls must be in [1, 1e9], got {calls}")
        first = next(iter(self.workloads))
        self.workload = W.Dropdown(options=list(self.workloads), value=first, description="workload",
                                   layout=W.Layout(width="460px"))
        self.mode = W.Dropdown(options=self._modes(first), description="mode", layout=W.Layout(width="360px"))
        self.calls = W.FloatLogSlider(value=calls, base=10, min=0, max=9, step=0.1, description="calls",
                                      readout_format=",.0f", continuous_update=True, layout=W.Layout(width="520px"))
        self.text = W.HTML()
        self.out = W.Output()
        self.figure: go.Figure = go.Figure()
        self.break_even = math.inf
        self._quiet = False
        self.workload.observe(self._on_workload, names="value")
        for w in (self.mode, self.calls):
            w.observe(self.update, names="value")
        self.widget = W.VBox([W.HBox([self.workload, self.mode]), self.calls, self.text, self.out])
        self.widget.add_class("ck-breakeven")
        self.update()

    def _modes(self, workload: str) -> list[str]:
        return [m for m in self.workloads[workload] if m != "eager"]

    def _on_workload(self, change: dict) -> None:
        modes = self._modes(change["new"])
        keep = self.mode.value if self.mode.value in modes else modes[0]
        self._quiet = True                 # one redraw after the options change, not one per trait
        try:
            self.mode.options = modes
            self.mode.value = keep
        finally:
            self._quiet = False
        self.update()

    def update(self, change: object = None) -> None:
        """Re-evaluate the totals and the break-even point; redraw."""
        by = self.workloads[self.workload.value]
        if self._quiet or self.mode.value not in by:
            return
        eager, row = by["eager"], by[self.mode.value]
        n = int(round(self.calls.value))
        self.break_even = break_even_calls(row.get("compile_s") or 0.0, row["steady_s"], eager["steady_s"])
        text = explain_breakeven(eager, row, n)
        self.text.value = f'<div class="ck-breakeven-text">{html.escape(text).replace("`", "")}</div>'
        self.figure = breakeven_figure(eager, row, n, self.break_even,
                                       title=f"{self.workload.value}: {row['mode']} against eager")
        redraw(self.out, self.figure)

    def _ipython_display_(self) -> None:
        from IPython.display import display
        display(self.widget)
