"""Notebook 04's capture gallery: pick a trap and a capture method; see what was captured and
whether the capture still matches eager. Every cell is a real capture (`capture_gallery.gallery_cell`),
cached, so flipping back to a cell is instant; the grid fills in as cells are tried.
"""
from __future__ import annotations

import html

import ipywidgets as W
import plotly.graph_objects as go

from ..capture.methods import METHODS
from ..capture.gallery import TRAPS, gallery_cell
from ..plots.capture import gallery_figure
from .dtypes import redraw

__all__ = ["CaptureGallery", "verdict_html"]

_COLOUR = {"correct": "#1a7f37", "silently wrong": "#d97706", "refused": "#cf222e", "fails at run": "#cf222e"}


def _mark(status: str) -> str:
    """A coloured square: an HTML mark that every font shows (an emoji is an empty box without one)."""
    return (f'<span style="display:inline-block;width:0.8em;height:0.8em;border-radius:2px;'
            f'vertical-align:-0.05em;background:{_COLOUR[status]}"></span>')


def verdict_html(cell: dict) -> str:
    """The verdict, why, and the captured program (an excerpt of its operator lines)."""
    ir = cell.get("ir") or "(nothing captured)"
    return (f'<div class="ck-gallery-verdict"><b>{html.escape(cell["trap"])}</b> with '
            f'<code>{html.escape(cell["method"])}</code>: <span class="ck-status">{_mark(cell["status"])} '
            f'{html.escape(cell["status"])}</span>. {html.escape(cell["detail"])}<br><i>{html.escape(cell["note"])}'
            f'</i><pre class="ck-ir" style="font-size:11px;max-height:260px;overflow:auto">{html.escape(ir)}</pre></div>')


class CaptureGallery:
    """Two selectors (trap, method); the verdict with the captured IR, and the grid of verdicts."""

    def __init__(self, trap: str = "data-dependent branch", method: str = "jit.trace", prefill: bool = False) -> None:
        if trap not in TRAPS:
            raise ValueError(f"unknown trap {trap!r}; choose one of {list(TRAPS)}")
        if method not in METHODS:
            raise ValueError(f"unknown capture method {method!r}; choose one of {METHODS}")
        self.trap = W.ToggleButtons(options=list(TRAPS), value=trap, description="trap",
                                    style={"button_width": "190px"})   # "data-dependent branch" whole
        self.method = W.ToggleButtons(options=list(METHODS), value=method, description="capture")
        self.verdict = W.HTML()
        self.out = W.Output()
        self.figure: go.Figure = go.Figure()
        self.tried: dict[tuple[str, str], dict] = {}
        if prefill:
            for t in TRAPS:
                for m in METHODS:
                    self.tried[(t, m)] = gallery_cell(t, m)
        for w in (self.trap, self.method):
            w.observe(self.update, names="value")
        self.widget = W.VBox([self.trap, self.method, self.verdict, self.out])
        self.widget.add_class("ck-capture-gallery")
        self.update()

    def update(self, change: object = None) -> None:
        """Capture the selected cell (or take it from the cache) and redraw the verdict and the grid."""
        key = (self.trap.value, self.method.value)
        self.cell = self.tried[key] = gallery_cell(*key)
        self.verdict.value = verdict_html(self.cell)
        self.figure = gallery_figure(list(self.tried.values()), list(TRAPS), METHODS, selected=key)
        redraw(self.out, self.figure)

    def _ipython_display_(self) -> None:
        from IPython.display import display
        display(self.widget)
