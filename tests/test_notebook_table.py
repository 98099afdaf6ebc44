"""notebook.table wraps instead of cutting (issue 42 item 6), and notebook.quiet silences torch's stderr."""
import logging
import re
import sys

import pytest

from course_kit import notebook


def test_a_table_wraps_its_cells_and_fits_the_column():
    long = "refused: Could not guard on data-dependent expression Eq(u0, 1) (unhinted: Eq(u0, 1))"
    t = notebook.table(["case", "export"], [["<b>branch</b>", long]], fills=[[None, "#f8d0d0"]], widths=[1, 3])
    html = t._repr_html_()
    assert long in html and "white-space:normal" in html and "overflow-wrap:anywhere" in html
    assert f"{notebook.COLUMN_PX}px" in html and "background:#f8d0d0" in html
    assert re.search(r"width:25\.0%.*width:75\.0%", html)
    assert "branch" in repr(t) and long in repr(t)
    with pytest.raises(ValueError, match="must have 2 cells"):
        notebook.table(["a", "b"], [["only one"]])
    with pytest.raises(ValueError, match="shape"):
        notebook.table(["a"], [["x"]], fills=[["#fff", "#000"]])


def test_the_capture_comparison_is_a_wrapping_table_in_words():
    from course_kit.capture import methods
    from course_kit.plots.capture import comparison_figure
    rows = [{"case": "branch", "note": "if x.sum() > 0", **{m: methods.Cell("refused", "a long reason " * 8)
                                                             for m in methods.METHODS}}]
    html = comparison_figure(rows, methods.METHODS)._repr_html_()
    assert "<b>refused</b>: a long reason" in html and "❌" not in html and "✅" not in html


def test_quiet_silences_torch_loggers_and_stderr_and_restores_them():
    log = logging.getLogger("torch.fx.experimental.symbolic_shapes")
    before = log.level
    with notebook.quiet() as q:
        print("partial graph", file=sys.stderr)
        assert log.getEffectiveLevel() >= logging.ERROR
    assert "partial graph" in q.text and log.level == before
