"""Pure functions that return plotly figures; one module per topic."""
from .roofline import roofline_figure, roofline_from_record

__all__ = ["roofline_figure", "roofline_from_record"]
