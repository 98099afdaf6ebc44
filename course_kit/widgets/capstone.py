"""Notebook 10's technique ladder: a toggle per technique; the capstone record's waterfall
(course_kit.capstone.ladder) redrawn at once, and a small live run on this machine behind a Run button
(a few seconds: it builds the tiny model, runs HF generate and the engine variants switched on)."""
from __future__ import annotations

import html
from typing import Any, Mapping

import ipywidgets as W
import plotly.graph_objects as go

from ..benchmarks import capstone as capstone_bench
from ..capstone import ladder
from ..plots.capstone import live_figure, waterfall_figure
from .dtypes import redraw

__all__ = ["TechniqueLadder"]


class TechniqueLadder:
    """Toggles for the techniques; the waterfall of `record` (a capstone record, or None)."""

    def __init__(self, record: Mapping[str, Any] | None, where: str = "the reference GPU") -> None:
        self.where = where
        self.steps = ladder.ladder(record["summary"]["throughput_tok_s"]) if record else None
        # every control carries a tooltip: without one, the browser shows "null" on hover
        self.toggles = {t: W.ToggleButton(value=True, description=t, tooltip=f"switch '{t}' off or on",
                                          layout=W.Layout(width="auto"))
                        for t in ladder.TECHNIQUES}
        self.run = W.Button(description="Run live (tiny model, a few seconds)", button_style="primary",
                            tooltip="measure the variants switched on, on this machine",
                            layout=W.Layout(width="auto"))
        self.bar = W.IntProgress(value=0, min=0, max=1, description="live run")
        self.text, self.live_text = W.HTML(), W.HTML()
        self.out, self.out_live = W.Output(), W.Output()
        self.figure: go.Figure | None = None
        self.live: dict[str, float] | None = None
        self.live_figure: go.Figure | None = None
        for t in self.toggles.values():
            t.observe(self.update, names="value")
        self.run.on_click(self.run_live)
        self.widget = W.VBox([W.HBox(list(self.toggles.values())), self.text, self.out,
                              W.HBox([self.run, self.bar]), self.live_text, self.out_live])
        self.update()

    def enabled(self) -> list[str]:
        return [t for t, w in self.toggles.items() if w.value]

    def update(self, change: object = None) -> None:
        if self.steps is None:
            self.text.value = "No capstone record here: only the live run below is available."
            return
        w = ladder.waterfall(self.steps, self.enabled())
        self.text.value = html.escape(ladder.explain_waterfall(w, self.where)).replace("`", "")
        self.figure = waterfall_figure(w, title=f"Throughput ladder on {self.where}")
        redraw(self.out, self.figure)

    def run_live(self, button: object = None) -> dict[str, float]:
        """Measure the variants switched on here (blocks the kernel for a few seconds)."""
        def progress(i: int, n: int) -> None:
            self.bar.max, self.bar.value = n, i
        self.run.disabled = True
        try:
            self.live = capstone_bench.live_run(self.enabled(), progress=progress)
        finally:
            self.run.disabled = False
        peer = self.live["HF generate"]
        from ..narrate import rate
        items = [f"{html.escape(k)}: {v:,.0f} tokens/s, {rate(v, peer)} HF generate"
                 for k, v in self.live.items() if k != "HF generate"]
        self.live_text.value = ("Live, tiny model on this machine (CUDA graphs and fusion need a GPU):<ul>"
                                + "".join(f"<li>{x}</li>" for x in items) + "</ul>")
        self.live_figure = live_figure(self.live, title="Live run on this machine (tiny model)")
        redraw(self.out_live, self.live_figure)
        return self.live

    def _ipython_display_(self) -> None:
        from IPython.display import display
        display(self.widget)
