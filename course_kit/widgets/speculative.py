"""Notebook 10's speculation explorer: choose k and the draft; see how often each draft position was
kept, the speed-up Leviathan et al.'s formula predicts from alpha and c, and the one recorded (the
`course-kit bench speculative` record, redrawn at once). Behind a Run button, the same decode live on
this machine with the shipped checkpoints (a few seconds on a CPU at small k), its tokens coloured
by where they came from."""
from __future__ import annotations

import html
from typing import Any, Mapping

import ipywidgets as W
import plotly.graph_objects as go

from ..plots.speculative import acceptance_figure, spec_rows, speedup_figure
from ..capstone.speculative import explain
from .dtypes import redraw

__all__ = ["SpeculationExplorer", "DRAFTS", "tokens_html"]

DRAFTS = {"trained": "the trained draft (1 layer)", "random": "an untrained draft (same shape)",
          "target": "the main model itself"}
COLORS = {"prefill": "#e8e8e8", "draft": "#c7f0c2", "target": "#fde2b8"}


def tokens_html(pieces: list[str], provenance: list[str]) -> str:
    """Decoded tokens on coloured backgrounds: green were proposed by the draft and kept, orange are
    the target's own tokens that end a round, grey the first token (from the prefill)."""
    spans = [f'<span style="background:{COLORS[p]}" title="{p}">{html.escape(t)}</span>'
             for t, p in zip(pieces, provenance)]
    legend = " ".join(f'<span style="background:{c}">&nbsp;{k}&nbsp;</span>' for k, c in COLORS.items())
    return f'<div>{legend}</div><pre style="white-space:pre-wrap;line-height:1.5">{"".join(spans)}</pre>'


class SpeculationExplorer:
    """k and the draft against a speculative record (or None); `live` (a callable(draft, k) -> the
    dict of `measure.live_run`, with "pieces": the decoded tokens) runs a decode on this machine."""

    def __init__(self, record: Mapping[str, Any] | None, where: str = "the reference GPU", live=None,
                 live_max_k: int = 8) -> None:
        self.record, self.where, self.live_fn = record, where, live
        drafts = [d for d in DRAFTS if record and spec_rows(record, d)] or ["trained"]
        self.k = W.IntSlider(value=4, min=1, max=8, description="k", continuous_update=False)
        self.draft = W.Dropdown(options=[(DRAFTS[d], d) for d in drafts], value=drafts[0], description="draft",
                                layout=W.Layout(width="auto"))
        self.text, self.live_text, self.tokens = W.HTML(), W.HTML(), W.HTML()
        self.out_speed, self.out_accept = W.Output(), W.Output()
        self.run = W.Button(description=f"Decode live here (k <= {live_max_k})", button_style="primary",
                            layout=W.Layout(width="auto"), disabled=live is None)
        self.live_max_k = live_max_k
        self.bar = W.IntProgress(value=0, min=0, max=1, description="live")
        self.figures: dict[str, go.Figure] = {}
        self.live: dict | None = None
        self.k.observe(self.update, names="value")
        self.draft.observe(self.update, names="value")
        self.run.on_click(self.run_live)
        self.widget = W.VBox([W.HBox([self.k, self.draft]), self.text, W.HBox([self.out_accept, self.out_speed]),
                              W.HBox([self.run, self.bar]), self.live_text, self.tokens])
        self.update()

    def row(self) -> dict | None:
        rows = spec_rows(self.record, self.draft.value) if self.record else []
        return next((r for r in rows if r["k"] == self.k.value), None)

    def update(self, change: object = None) -> None:
        if not self.record:
            self.text.value = "No speculative record here: only the live decode below is available."
            return
        row, rows = self.row(), spec_rows(self.record, self.draft.value)
        summary = self.record.get("summary", {})
        if row is None:
            self.text.value = f"The record has no run with k = {self.k.value} for {DRAFTS[self.draft.value]}."
            return
        costs = summary.get("step_costs")
        words = (explain.explain_speedup(row, summary["target_alone_tokens_per_s"], costs, self.where)
                 if costs and row.get("alpha") is not None else "")
        self.text.value = html.escape(words).replace("**", "")
        self.figures["acceptance"] = acceptance_figure(row["acceptance_per_position"], alpha=row.get("alpha"),
                                                       title=f"Kept when reached, k = {row['k']}")
        self.figures["speedup"] = speedup_figure(rows, selected_k=row["k"],
                                                 title=f"{DRAFTS[self.draft.value]}, on {self.where}")
        redraw(self.out_accept, self.figures["acceptance"])
        redraw(self.out_speed, self.figures["speedup"])

    def run_live(self, button: object = None) -> dict | None:
        """Decode on this machine with the chosen draft and k (capped at live_max_k)."""
        if self.live_fn is None:
            return None
        k = min(self.k.value, self.live_max_k)
        self.run.disabled, self.bar.max, self.bar.value = True, 1, 0
        try:
            self.live = self.live_fn(self.draft.value, k)
        finally:
            self.run.disabled, self.bar.value = False, 1
        lv = self.live
        self.live_text.value = html.escape(
            f"Live on this machine, k = {k}: alpha = {lv['row']['alpha']:.2f}, {lv['row']['tokens_per_round']:.2f} "
            f"tokens a round, c = {lv['costs']['c']:.3f}; predicted {lv['predicted_speedup']:.2f}x, measured "
            f"{lv['speedup']:.2f}x the main model alone ({lv['base_tokens_per_s']:,.1f} tokens/s); the tokens are "
            + ("the main model's own greedy tokens." if lv["same_tokens_as_target"] else "NOT the main model's tokens."))
        self.tokens.value = tokens_html(lv.get("pieces") or [str(t) for t in lv["tokens"]], lv["provenance"])
        return lv

    def _ipython_display_(self) -> None:
        from IPython.display import display
        display(self.widget)
