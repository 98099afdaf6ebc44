"""Notebook 07's overlap widget: host work per step and sync/async mode, on the real step loop.

Each change reruns `streams.decode_loop` (the worker-thread device with steps of at least
`device_ms`, the real toy model, a few steps: about 0.1-0.3 s on 2 CPU cores) and redraws the CPU
and device lanes of its timeline with their idle fractions (`Timeline.idle_fraction`) and the
bound on the speed-up from overlap (`Timeline.overlap_speedup_bound`).
"""
from __future__ import annotations

import html

import ipywidgets as W
import plotly.graph_objects as go

from ..plots.streams import overlap_figure
from ..streams import decode_loop
from .dtypes import redraw

__all__ = ["OverlapExplorer", "readout_html"]


def readout_html(run: dict) -> str:
    """The numbers under the figure: wall time, tokens/s, each lane's busy time and idle share."""
    tl = run["timeline"]
    td = 'style="padding:2px 14px 2px 0;text-align:right"'     # cells never run together ("41.2 ms37.0%")
    rows = "".join(
        f'<tr><td style="padding:2px 14px 2px 0">{html.escape(lane)}</td><td {td}>{tl.busy_s(lane) * 1e3:,.1f} ms</td>'
        f'<td class="ck-idle" {td}>{tl.idle_fraction(lane):.1%}</td></tr>' for lane in ("cpu", "device"))
    return (f'<div class="ck-overlap-readout"><b>{html.escape(run["mode"])}</b>: {run["steps"]} steps in '
            f'<span class="ck-wall">{run["wall_s"] * 1e3:,.1f} ms</span>, '
            f'{run["tokens_per_s"]:,.0f} tokens/s; bound on the speed-up from overlap, read from this '
            f'timeline: {run["speedup_bound"]:.2f}x'
            f'<table style="border-collapse:collapse;margin-top:4px"><tr><th {td}>lane</th><th {td}>busy</th>'
            f'<th {td}>idle</th></tr>'
            f"{rows}</table></div>")


class OverlapExplorer:
    """Host work per step (the scheduler's Python bookkeeping), the device step time and the loop
    mode; the timeline's CPU and device lanes with their idle fractions."""

    def __init__(self, prep_work: int = 2000, device_ms: float = 2.0, mode: str = "sync",
                 steps: int = 10, batch: int = 8) -> None:
        if mode not in ("sync", "async"):
            raise ValueError(f"mode {mode!r} not in ('sync', 'async')")
        if not 0 <= prep_work <= 10_000:
            raise ValueError(f"prep_work={prep_work}; it must be in [0, 10000]")
        if not 0.5 <= device_ms <= 5.0:
            raise ValueError(f"device_ms={device_ms}; it must be in [0.5, 5.0]")
        if not 1 <= steps <= 64:
            raise ValueError(f"steps={steps}; it must be in [1, 64]")
        self.steps, self.batch = steps, batch
        self.work = W.IntSlider(value=prep_work, min=0, max=10_000, step=250, continuous_update=False,
                                description="host work", style={"description_width": "90px"},
                                layout=W.Layout(width="420px"))
        self.device_ms = W.FloatSlider(value=device_ms, min=0.5, max=5.0, step=0.5, continuous_update=False,
                                       description="device ms", style={"description_width": "90px"},
                                       readout_format=".1f", layout=W.Layout(width="420px"))
        self.mode = W.ToggleButtons(options=["sync", "async"], value=mode, description="loop")
        self.readout = W.HTML()
        self.out = W.Output()
        self.figure: go.Figure = go.Figure()
        self.run: dict = {}
        for w in (self.work, self.device_ms, self.mode):
            w.observe(self.update, names="value")
        self.widget = W.VBox([W.HBox([self.work, self.mode]), self.device_ms, self.readout, self.out])
        self.widget.add_class("ck-overlap-explorer")
        self.update()

    def update(self, change: object = None) -> None:
        """Rerun the loop with the controls' values; redraw the lanes and the numbers."""
        self.run = decode_loop(self.mode.value, batch=self.batch, steps=self.steps,
                               prep_work=self.work.value, device_ms=self.device_ms.value)
        self.readout.value = readout_html(self.run)
        self.figure = overlap_figure(self.run)
        redraw(self.out, self.figure)

    def _ipython_display_(self) -> None:
        from IPython.display import display
        display(self.widget)
