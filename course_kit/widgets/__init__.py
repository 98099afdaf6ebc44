"""ipywidgets UIs on top of the lessons' pure functions: one file per topic, controls wired to
functions that are tested without a browser.

Every widget is shown with `show(widget, figure)`: the live controls in Jupyter, and, in an executed
copy (`course-kit record`, where `COURSE_KIT_STATIC_FIGURES=1`), a static image of its initial figure
with a line saying the widget is live in Jupyter, so GitHub and nbviewer readers see something.

Modules:

    amp             Notebook 02's widgets: the loss-scale explorer and the scaler stepper.
    attention       Notebook 08's tiles widget: sequence length, block sizes and causal -> which tiles ...
    batching        Notebook 06's live-engine widget: policy, slots, chunk size and arrival rate, behind ...
    capstone        Notebook 10's technique ladder: a toggle per technique; the capstone record's waterfall
    capture         Notebook 04's capture gallery: pick a trap and a capture method; see what was ...
    compile_modes   Notebook 03's compile break-even widget: a workload (the chain measured live in this ...
    cuda_graphs     Notebook 05's graph-bucket widget: choose the captured batch sizes for a trace of ...
    dtypes          The slider-driven overflow explorer and the operation explorer (ipywidgets + plotly).
    memory          The memory estimator: sliders and a stacked bar chart of bytes per GPU at TP 1, 2, 4, 8.
    parallel        Notebook 09's memory and time widgets.
    pipeline        Notebook 09's pipeline-schedule widget: stages, micro-batches, schedule (GPipe, 1F1B,
    roofline        Notebook 00's roofline explorer: pick an operation, its size and dtype; see its ...
    speculative     Notebook 10's speculation explorer: k and the draft; acceptance, predicted and recorded ...
    streams         Notebook 07's overlap widget: host work per step and sync/async mode, on the real ...
    woq             Notebook 01 §7's weight-only explorer: a product, a format and a batch size; its ...
"""
from __future__ import annotations

import os
from typing import Any


def static_figures() -> bool:
    """True when executed copies should carry static images (set by `course-kit record`)."""
    return os.environ.get("COURSE_KIT_STATIC_FIGURES", "").strip().lower() in ("1", "true", "yes", "on")


def _display_widget(widget: Any) -> None:
    """The widget's live view, with `lab.RERUN_NOTE` as its plain-text form: what a reader without the
    widget (GitHub, nbviewer, a notebook reopened without its state) sees instead of its repr."""
    from IPython.display import display
    from ..lab import RERUN_NOTE
    bundle = getattr(widget, "_repr_mimebundle_", None)
    data = bundle() if callable(bundle) else None
    if not isinstance(data, dict) or "application/vnd.jupyter.widget-view+json" not in data:
        display(widget)
        return
    display({**data, "text/plain": RERUN_NOTE}, raw=True)


def show(widget: Any, figure: Any = None, what: str = "this widget") -> None:
    """Display an ipywidget; in an executed copy also a static image of `figure` (a plotly figure),
    captioned, or, where no image can be made here, nothing (the record's finishing pass makes it)."""
    _display_widget(widget)
    if figure is not None and static_figures():
        from ..plots import static
        static.display_widget_static(figure, what)
