"""Notebook 05's graph-bucket widget: choose the captured batch sizes for a trace of decode steps.

Each checkbox is a batch size a runner could capture. Every change recomputes `buckets.bucket_cost`
(pure Python, milliseconds): the padding rows each step adds, the padding waste over the trace, and
the trace's time stepped eagerly against replayed, from measured step times per batch size.
"""
from __future__ import annotations

import html
from typing import Mapping, Sequence

import ipywidgets as W
import plotly.graph_objects as go

from .. import narrate
from ..cuda_graphs.buckets import bucket_cost
from ..plots.cuda_graphs import buckets_figure
from .dtypes import redraw

__all__ = ["GraphBuckets", "readout_html"]


def readout_html(cost: dict, source: str) -> str:
    """Padding waste, and the replayed trace against the eager one in words that follow the numbers."""
    fall = cost["eager_fallback_steps"]
    return (f'<div class="ck-buckets-readout">{len(cost["steps"])} decode steps, {cost["real_rows"]:,} real rows, '
            f'<span class="ck-padding">{cost["padding_rows"]:,} padding rows '
            f'({cost["padding_waste"]:.1%} of the rows computed)</span>. '
            f'Per step: eager <span class="ck-eager">{cost["eager_ms_per_step"]:.3f} ms</span>, replay '
            f'<span class="ck-replay">{cost["replay_ms_per_step"]:.3f} ms</span>: replaying ran '
            f'{html.escape(narrate.speed(cost["replay_ms"], cost["eager_ms"]))} stepping eagerly'
            + ("; no graph captured, so every step ran eagerly" if not cost["sizes"] else
               f"; {fall} step(s) larger than every bucket ran eagerly" if fall else "")
            + f". Step times: {html.escape(source)}.</div>")


class GraphBuckets:
    """Checkboxes for the captured batch sizes; the trace's padding and time, eager against replay."""

    def __init__(self, batches: Sequence[int], eager_ms: Mapping[int, float], graph_ms: Mapping[int, float],
                 max_batch: int, chosen: Sequence[int] = (1, 2, 4, 8), source: str = "") -> None:
        if not batches:
            raise ValueError("the trace has no decode steps")
        if max_batch < 1 or max_batch > 64:
            raise ValueError(f"max_batch={max_batch}; it must be in [1, 64]")
        bad = [c for c in chosen if not 1 <= c <= max_batch]
        if bad or not chosen:
            raise ValueError(f"chosen sizes {list(chosen)} must be a non-empty subset of 1..{max_batch}")
        if not eager_ms or not graph_ms:
            raise ValueError("eager_ms and graph_ms need at least one measured batch size each")
        self.batches, self.eager, self.graph, self.source = list(batches), dict(eager_ms), dict(graph_ms), source
        self.boxes = {b: W.Checkbox(value=b in chosen, description=str(b), indent=False,
                                    layout=W.Layout(width="48px")) for b in range(1, max_batch + 1)}
        self.readout = W.HTML()
        self.out = W.Output()
        self.figure: go.Figure = go.Figure()
        self.cost: dict = {}
        for box in self.boxes.values():
            box.observe(self.update, names="value")
        self.widget = W.VBox([W.HBox([W.Label("captured batch sizes:")] + list(self.boxes.values())),
                              self.readout, self.out])
        self.widget.add_class("ck-graph-buckets")
        self.update()

    @property
    def sizes(self) -> list[int]:
        return [b for b, box in self.boxes.items() if box.value]

    def update(self, change: object = None) -> None:
        """Recompute the cost of the chosen buckets; with none chosen every step runs eagerly."""
        sizes = self.sizes
        if sizes:
            self.cost = bucket_cost(self.batches, sizes, self.eager, self.graph)
        else:   # no graph captured: the trace runs eagerly, no padding
            self.cost = bucket_cost(self.batches, [10**9], self.eager, {10**9: 0.0})
            self.cost.update(sizes=[], replay_ms=self.cost["eager_ms"],
                             replay_ms_per_step=self.cost["eager_ms_per_step"],
                             padding_rows=0, padding_waste=0.0, eager_fallback_steps=len(self.batches))
            for s in self.cost["steps"]:
                s.update(graph=None, padding=0, replay_ms=s["eager_ms"])
        self.readout.value = readout_html(self.cost, self.source)
        self.figure = buckets_figure(self.cost, self.source)
        redraw(self.out, self.figure)

    def _ipython_display_(self) -> None:
        from IPython.display import display
        display(self.widget)
