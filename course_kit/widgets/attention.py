"""Notebook 08's tiles widget: sequence length, block sizes and causal -> which tiles the kernel
computes or skips, its HBM traffic against standard attention, and one query row stepped through
the online softmax block by block.

Only wiring: the tiles come from attention/tiles.py, the traffic from attention/io_complexity.py,
the row from attention/row_steps.py (which folds with online_softmax.online_softmax_update), the
figures from plots/attention.py and the sentence from attention/explain.py. Every update reruns
them (milliseconds at these sizes). Figures are drawn into Output widgets with widgets.dtypes.redraw
(plain plotly display data: JupyterLab, Colab and executed copies alike). Tests set a control's
value and read .tiles_figure, .row_figure, .text.value and .row_text.value.
"""
from __future__ import annotations

import html

import ipywidgets as W
import plotly.graph_objects as go
import torch

from ..attention import explain, io_complexity, row_steps, tiles
from ..plots.attention import causal_tiles_figure, row_walk_figure, traffic_figure
from .dtypes import redraw

BLOCKS = (32, 64, 128, 256)
MAX_SEQ = 4096
ROW_DIM = 16            # head dim of the stepped row: small, so its output fits one panel


class TilesExplorer:
    """Sequence length, BLOCK_M, BLOCK_N, causal and head dim; the tile grid, HBM traffic per head
    (bf16) against standard attention, and one query row folded block by block."""

    def __init__(self, seq_len: int = 1000, block_m: int = 128, block_n: int = 64, causal: bool = True,
                 head_dim: int = 128, sram: tuple[int, str] | None = None, seed: int = 0) -> None:
        if not 16 <= seq_len <= MAX_SEQ:
            raise ValueError(f"seq_len must be in [16, {MAX_SEQ}]; got {seq_len}")
        for name, b in (("block_m", block_m), ("block_n", block_n)):
            if b not in BLOCKS:
                raise ValueError(f"{name} must be one of {BLOCKS}; got {b}")
        self.sram_bytes, self.sram_source = sram or io_complexity.sram_here()
        g = torch.Generator().manual_seed(seed)
        # one head's random keys and values, sliced to the chosen length (never zeros)
        self._q = torch.randn(MAX_SEQ, ROW_DIM, generator=g)
        self._k = torch.randn(MAX_SEQ, ROW_DIM, generator=g)
        self._v = torch.randn(MAX_SEQ, ROW_DIM, generator=g)
        self.seq_len = W.IntSlider(value=seq_len, min=16, max=MAX_SEQ, step=8, description="S",
                                   continuous_update=False, layout=W.Layout(width="420px"))
        self.block_m = W.Dropdown(options=list(BLOCKS), value=block_m, description="BLOCK_M",
                                  layout=W.Layout(width="180px"))
        self.block_n = W.Dropdown(options=list(BLOCKS), value=block_n, description="BLOCK_N",
                                  layout=W.Layout(width="180px"))
        self.causal = W.Checkbox(value=causal, description="causal", indent=False)
        self.head_dim = W.Dropdown(options=[64, 128], value=head_dim, description="head dim",
                                   layout=W.Layout(width="180px"))
        self.row = W.IntSlider(value=seq_len - 1, min=0, max=seq_len - 1, description="query row",
                               continuous_update=False, layout=W.Layout(width="420px"))
        self.step = W.IntSlider(value=1, min=1, max=1, description="key block", continuous_update=True,
                                layout=W.Layout(width="420px"))
        self.text = W.HTML()
        self.text.add_class("ck-tiles-text")
        self.row_text = W.HTML()
        self.row_text.add_class("ck-row-text")
        self.out_tiles, self.out_traffic, self.out_row = W.Output(), W.Output(), W.Output()
        for out, cls in ((self.out_tiles, "ck-tiles-fig"), (self.out_traffic, "ck-traffic-fig"),
                         (self.out_row, "ck-row-fig")):
            out.add_class(cls)
        self.tiles_figure = self.traffic_figure = self.row_figure = go.Figure()
        self.numbers: dict = {}
        self.walk: row_steps.RowWalk | None = None
        self._quiet = False
        for w in (self.seq_len, self.block_m, self.block_n, self.causal, self.head_dim):
            w.observe(self.update, names="value")
        self.row.observe(self._on_row, names="value")
        self.step.observe(self._on_step, names="value")
        self.widget = W.VBox([
            W.HBox([self.seq_len, self.causal]), W.HBox([self.block_m, self.block_n, self.head_dim]),
            # the two figures side by side where the page is wide enough, one above the other if not
            self.text, W.HBox([self.out_tiles, self.out_traffic], layout=W.Layout(flex_flow="row wrap")),
            W.HTML("<b>One query row through the online softmax</b>"), W.HBox([self.row, self.step]),
            self.row_text, self.out_row])
        self.widget.add_class("ck-tiles-explorer")
        self.update()

    # -- tiles and traffic -------------------------------------------------------------------
    def update(self, change: object = None) -> None:
        """Recompute the tile grid, the traffic counts and the sentence; then the row (its range changes)."""
        if self._quiet:
            return
        s, bm, bn, causal, d = (self.seq_len.value, self.block_m.value, self.block_n.value,
                                self.causal.value, self.head_dim.value)
        grid = tiles.tile_grid(s, bm, bn, causal)
        t = io_complexity.traffic(s, d, bm, bn, causal, self.sram_bytes, element_bytes=2)
        self.numbers = {"counts": tiles.tile_counts(grid), **{k: t[k] for k in ("standard", "flash", "kernel")},
                        "computed_fraction": tiles.computed_fraction(s, bm, bn, causal)}
        counts = self.numbers["counts"]
        self.text.value = (
            f"<div><b>{counts['no mask']}</b> tiles unmasked, <b>{counts['masked']}</b> masked, "
            f"<b>{counts['skipped']}</b> skipped: {self.numbers['computed_fraction']:.1%} of the S x S scores "
            f"are computed. " + html.escape(explain.explain_io_counts(
                s, d, t["standard"], t["flash"], self.sram_bytes, t["sram_elements"], kernel=t["kernel"],
                causal=causal))
            .replace("**", "") + f" <i>(M: {html.escape(self.sram_source)}; bf16, one head.)</i></div>")
        self.tiles_figure = causal_tiles_figure(s, bm, bn, causal)
        self.traffic_figure = traffic_figure(t["rows"], title=f"HBM traffic of one head, S={s}, d={d}, bf16")
        self.traffic_figure.update_layout(width=560)
        redraw(self.out_tiles, self.tiles_figure)
        redraw(self.out_traffic, self.traffic_figure)
        self._quiet = True             # one row redraw after moving the row slider's bounds
        try:
            # a new length starts at its last row (it sees every key); other changes keep the row
            owner = change.get("owner") if isinstance(change, dict) else None
            self.row.max = s - 1
            self.row.value = s - 1 if owner is self.seq_len else min(self.row.value, s - 1)
        finally:
            self._quiet = False
        self._on_row()

    # -- the row -----------------------------------------------------------------------------
    def _on_row(self, change: object = None) -> None:
        if self._quiet:
            return
        s, bn, causal = self.seq_len.value, self.block_n.value, self.causal.value
        i = self.row.value
        visible = i + 1 if causal else s
        self.walk = row_steps.row_walk(self._q[i], self._k[:s], self._v[:s], bn, visible=visible)
        self._quiet = True
        try:
            self.step.max = len(self.walk.steps)
            self.step.value = 1
        finally:
            self._quiet = False
        self._on_step()

    def _on_step(self, change: object = None) -> None:
        if self._quiet or self.walk is None:
            return
        k = self.step.value - 1
        st = self.walk.steps[k]
        prev_m = self.walk.steps[k - 1]["m"] if k else None
        rescale = ("first block: the sum starts here" if prev_m is None else
                   f"the max grew from {prev_m:.3f}, so the old sum and output were multiplied by "
                   f"α = {st['alpha']:.3g}" if st["m"] > prev_m else "the max did not grow: α = 1, nothing rescaled")
        self.row_text.value = (
            f"<div>Query row {self.row.value}, keys {st['start']}-{st['end'] - 1} folded (block {k + 1} of "
            f"{len(self.walk.steps)}): running max m = <b>{st['m']:.4f}</b>, running sum l = <b>{st['l']:.4f}</b>; "
            f"{rescale}. Output so far against the exact row: max |error| = <b>{st['err']:.2e}</b>.</div>")
        self.row_figure = row_walk_figure(self.walk, k)
        redraw(self.out_row, self.row_figure)

    def _ipython_display_(self) -> None:
        from IPython.display import display
        display(self.widget)
