"""plots/tables.py: text tables as HTML that wraps words instead of cutting them (issue 42 item 6)."""
import pytest

from course_kit.plots.tables import Table, html_table


def test_html_table_escapes_wraps_and_aligns():
    text = html_table(["x", "why"], [[1, "needs sm_80 <and> newer"], [2, "ok"]], title="T & t", numeric=(0,))
    assert "needs sm_80 &lt;and&gt; newer" in text and "T &amp; t" in text
    assert "white-space:normal" in text and "nowrap" not in text and "overflow-wrap:anywhere" in text
    assert text.count("<tr>") == 3 and "text-align:right" in text
    raw = html_table(["a"], [["1<br><i>rounded</i>"]], raw_html=True)
    assert "<br><i>rounded</i>" in raw


def test_html_table_refuses_ragged_rows():
    with pytest.raises(ValueError, match="row 1 has 1 cells; the header has 2"):
        html_table(["a", "b"], [[1, 2], [3]])
    with pytest.raises(ValueError, match="at least one column"):
        html_table([], [])


def test_table_object_shows_itself_as_html():
    t = Table(["a", "b"], [[1, "x"], [2, "y"]], title="t")
    assert t.column(1) == ["x", "y"] and t._repr_html_().startswith("<div")
