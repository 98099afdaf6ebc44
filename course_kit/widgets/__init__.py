"""ipywidgets UIs on top of the lessons' pure functions: one file per topic, controls wired to
functions that are tested without a browser.

Every widget is shown with `show(widget, figure)`: the live controls in Jupyter, and, in an executed
copy (`course-kit record`, where `COURSE_KIT_STATIC_FIGURES=1`), a static image of its initial figure
with a line saying the widget is live in Jupyter, so GitHub and nbviewer readers see something.
"""
from __future__ import annotations

import os
from typing import Any


def static_figures() -> bool:
    """True when executed copies should carry static images (set by `course-kit record`)."""
    return os.environ.get("COURSE_KIT_STATIC_FIGURES", "").strip().lower() in ("1", "true", "yes", "on")


def show(widget: Any, figure: Any = None, what: str = "this widget") -> None:
    """Display an ipywidget; in an executed copy also a static image of `figure` (a plotly figure)."""
    from IPython.display import Markdown, display
    display(widget)
    if figure is not None and static_figures():
        from ..plots import static
        static.display_static(figure)
        display(Markdown(f"*Above: the initial view of {what}. In Jupyter it is live: move its controls.*"))
