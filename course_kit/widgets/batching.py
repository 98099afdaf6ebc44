"""Notebook 06's live-engine widget: policy, slots, chunk size and arrival rate, behind a Run button.

A run replays a seeded workload through the real engine (`batching_live.run_live`: the tiny model on
a CPU, about a second; the notebook's model on a GPU), with a progress bar that moves while it runs,
then redraws the slot Gantt with each request's TTFT and TPOT and the run's p50 figures.
"""
from __future__ import annotations

import html

import ipywidgets as W
import plotly.graph_objects as go

from ..batching.live import POLICIES, run_live
from ..plots.batching import live_figure
from .dtypes import redraw

__all__ = ["LiveEngine", "readout_html"]


def readout_html(run: dict) -> str:
    """The run's settings and its p50 TTFT and TPOT, throughput and slot occupancy, formatted."""
    s = run["summary"]
    return (f'<div class="ck-live-readout"><b>{html.escape(run["policy"])}</b>, {run["slots"]} slots, '
            f'prefill chunk {run["chunk"]} tokens, {run["rate"]:g} requests/s, {run["n_requests"]} requests: '
            f'TTFT p50 <span class="ck-ttft">{s["ttft_p50_s"] * 1e3:,.1f} ms</span> '
            f'(p99 {s["ttft_p99_s"] * 1e3:,.1f} ms), TPOT p50 <span class="ck-tpot">{s["tpot_p50_s"] * 1e3:,.2f} ms'
            f'</span>, {s["throughput_tok_s"]:,.0f} tokens/s, slots busy {s["slot_occupancy"]:.0%}, '
            f'{int(s["steps"])} steps.</div>')


FIGURE_PX = 860    # fits the output area of a ~970 px notebook column (a 1,400 px window with the file browser open)


class LiveEngine:
    """Controls for one engine run; Run replays the workload and redraws the figure and the numbers."""

    def __init__(self, model, policy: str = "continuous", slots: int = 4, chunk: int = 64, rate: float = 20.0,
                 n_requests: int = 12, seed: int = 0, prompt_len: tuple[int, int] = (4, 48),
                 output_len: tuple[int, int] = (4, 24), run: bool = True) -> None:
        if policy not in POLICIES:
            raise ValueError(f"policy {policy!r}; choose one of {POLICIES}")
        if not 1 <= slots <= 64:
            raise ValueError(f"slots={slots}; it must be in [1, 64]")
        if not 8 <= chunk <= 4096:
            raise ValueError(f"chunk={chunk}; it must be in [8, 4096] tokens")
        if not 1 <= rate <= 1000:
            raise ValueError(f"rate={rate}; it must be in [1, 1000] requests per second")
        self.model, self.n_requests, self.seed = model, n_requests, seed
        self.prompt_len, self.output_len = prompt_len, output_len
        style = {"description_width": "110px"}
        self.policy = W.ToggleButtons(options=list(POLICIES), value=policy, description="policy")
        self.slots = W.IntSlider(value=slots, min=1, max=max(16, slots), description="slots", style=style)
        self.chunk = W.IntSlider(value=chunk, min=8, max=max(256, chunk), step=8, description="prefill chunk",
                                 style=style)
        rates = sorted({1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, rate})
        self.rate = W.SelectionSlider(options=rates, value=rate, description="requests/s", style=style)
        self.button = W.Button(description="Run", button_style="primary", icon="play")
        self.progress = W.FloatProgress(value=0.0, min=0.0, max=1.0, description="", layout=W.Layout(width="240px"))
        self.readout = W.HTML()
        self.out = W.Output()
        self.figure: go.Figure = go.Figure()
        self.run: dict = {}
        self.button.on_click(self.on_run)
        self.widget = W.VBox([self.policy, W.HBox([self.slots, self.chunk]), self.rate,
                              W.HBox([self.button, self.progress]), self.readout, self.out])
        self.widget.add_class("ck-live-engine")
        if run:
            self.on_run()

    def _progress(self, fraction: float) -> None:
        self.progress.value = fraction

    def on_run(self, button: object = None) -> None:
        """Replay the workload with the controls' values; redraw the Gantt, TTFT/TPOT and the numbers."""
        self.button.disabled = True
        self.progress.value, self.progress.bar_style = 0.0, ""
        try:
            self.run = run_live(self.model, self.policy.value, self.slots.value, self.chunk.value, self.rate.value,
                                self.n_requests, self.seed, self.prompt_len, self.output_len,
                                on_progress=self._progress)
            self.progress.bar_style = "success"
        finally:
            self.button.disabled = False
        self.readout.value = readout_html(self.run)
        self.figure = live_figure(self.run)
        self.figure.update_layout(width=FIGURE_PX)
        redraw(self.out, self.figure)

    def _ipython_display_(self) -> None:
        from IPython.display import display
        display(self.widget)
