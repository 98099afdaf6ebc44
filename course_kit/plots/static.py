"""Static images of plotly figures, for executed copies read outside Jupyter (GitHub, nbviewer).

`course-kit record` sets COURSE_KIT_STATIC_FIGURES=1; then widgets and figures also carry a PNG.
The PNG is made by kaleido where it is installed; without it nothing is added (the live figure stays).
"""
from __future__ import annotations

from typing import Any


def to_png(figure: Any, width: int = 900, height: int | None = None) -> bytes | None:
    """The figure as PNG bytes, or None when no static renderer (kaleido) is available."""
    try:
        return figure.to_image(format="png", width=width, height=height or figure.layout.height or 450)
    except Exception:  # noqa: BLE001 - kaleido missing or unable to start: no static copy, never a failure
        return None


def display_static(figure: Any) -> bool:
    """Display a PNG of `figure`; True when one was shown."""
    png = to_png(figure)
    if png is None:
        return False
    from IPython.display import Image, display
    display(Image(png))
    return True
