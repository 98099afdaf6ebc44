"""Notebook 09's pipeline-schedule widget: stages, micro-batches, schedule (GPipe, 1F1B,
interleaved 1F1B) and model chunks; the simulated Gantt chart (course_kit.parallel.schedules)
with its bubble against the formula, and a computed readout. A redraw simulates a few hundred
steps: milliseconds, so the sliders update live."""
from __future__ import annotations

import ipywidgets as W
import plotly.graph_objects as go

from ..parallel import schedules
from ..plots.parallel import schedule_figure
from .dtypes import redraw

__all__ = ["PipelineSchedules"]

_NAMES = {"gpipe": "GPipe", "1f1b": "1F1B", "interleaved": "interleaved 1F1B"}


class PipelineSchedules:
    """Sliders p, m, v and the backward/forward cost ratio; a schedule picker."""

    def __init__(self, p: int = 4, m: int = 8, kind: str = "1f1b", v: int = 2, t_b: float = 2.0) -> None:
        if kind not in schedules.KINDS:
            raise ValueError(f"schedule={kind!r}; choose one of {schedules.KINDS}")
        self.kind = W.ToggleButtons(options=[(_NAMES[k], k) for k in schedules.KINDS], value=kind,
                                    description="schedule")
        self.p = W.IntSlider(value=p, min=2, max=8, description="stages p", continuous_update=False)
        self.m = W.IntSlider(value=m, min=1, max=32, description="micro-batches m", continuous_update=False,
                             style={"description_width": "initial"})
        self.v = W.IntSlider(value=v, min=2, max=4, description="chunks v", continuous_update=False)
        self.t_b = W.FloatSlider(value=t_b, min=0.5, max=4.0, step=0.5, description="backward / forward",
                                 continuous_update=False, style={"description_width": "initial"})
        self.v_note = W.HTML()        # why v is greyed out, where it is
        self.v_note.add_class("ck-pipeline-v-note")
        self.text = W.HTML()
        self.out = W.Output()
        self.figure: go.Figure | None = None
        self.summary: dict | None = None
        for w in (self.kind, self.p, self.m, self.v, self.t_b):
            w.observe(self.update, names="value")
        self.widget = W.VBox([self.kind, W.HBox([self.p, self.m]), W.HBox([self.v, self.t_b]), self.v_note,
                              self.text, self.out])
        # CSS hooks for the browser test (tests/test_browser_nb09.py)
        self.widget.add_class("ck-pipeline-schedules")
        self.text.add_class("ck-pipeline-text")
        self.out.add_class("ck-pipeline-fig")
        self.update()

    def update(self, change: object = None) -> None:
        kind, p, m = self.kind.value, self.p.value, self.m.value
        v = self.v.value if kind == "interleaved" else 1
        self.v.disabled = kind != "interleaved"
        self.v_note.value = ("" if kind == "interleaved" else
                             f"<i>chunks v is off: {_NAMES[kind]} gives each rank one chunk of the model; "
                             "v applies to interleaved 1F1B only.</i>")
        try:
            self.summary = schedules.schedule_summary(kind, p, m, v, 1.0, self.t_b.value)
        except ValueError as err:   # interleaved needs m to be a multiple of p: say so, keep the old chart
            self.text.value = f"<b>{_NAMES[kind]}</b>: {err}"
            self.summary = None
            return
        text = schedules.explain_simulation(kind, p, m, v, 1.0, self.t_b.value)
        self.text.value = text.replace("**", "")
        self.figure = schedule_figure(self.summary["events"], title=f"{_NAMES[kind]}, p={p}, m={m}"
                                      + (f", v={v}" if kind == "interleaved" else ""),
                                      theory=self.summary["theory"])
        redraw(self.out, self.figure)

    def _ipython_display_(self) -> None:
        from IPython.display import display
        display(self.widget)
