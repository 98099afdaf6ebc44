"""Text tables as HTML, for notebooks 01, 08 and 09: the browser wraps a cell's words inside the
column and the table takes the height its rows need, so nothing is cut mid-word (a plotly table
clips its cells to a fixed figure height, issue 42 item 6), and an executed copy stores a few
kilobytes of HTML instead of a PNG of the table.

    display(HTML(html_table(["model", "GPUs"], [["llama-1b", 2]], title="...")))
    Table(["model", "GPUs"], [["llama-1b", 2]], title="...")    # shows itself as that HTML
"""
from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any, Sequence

__all__ = ["html_table", "Table", "TABLE_CLASS", "COLUMN_PX"]

TABLE_CLASS = "ck-table"
COLUMN_PX = 1100    # the notebook column every table and figure must fit
_TABLE = (f"border-collapse:collapse;width:auto;max-width:min(100%,{COLUMN_PX}px);table-layout:auto;"
          "font-size:13px;margin:4px 0 10px 0;color:#111")
# words wrap at spaces; a single word longer than its column may break, never overflow
_CELL = "border:1px solid #d0d7de;padding:4px 8px;vertical-align:top;white-space:normal;overflow-wrap:anywhere"
_HEAD = _CELL + ";background:#eef2f7;font-weight:600;text-align:left"


def _cell(value: Any, raw: bool) -> str:
    return str(value) if raw else html.escape(str(value))


def html_table(header: Sequence[Any], rows: Sequence[Sequence[Any]], *, title: str | None = None,
               raw_html: bool = False, numeric: Sequence[int] = (), fills: Sequence[Sequence[Any]] | None = None,
               widths: Sequence[float] | None = None) -> str:
    """An HTML table. `raw_html`: cells are already HTML (line breaks, italics); otherwise escaped.
    `numeric`: column indices aligned right. `fills`: a background colour per cell (None: none), in
    the rows' shape. `widths`: relative column widths, e.g. (2, 1, 1). Every row must have as many
    cells as the header."""
    width = len(header)
    if width == 0:
        raise ValueError("a table needs at least one column")
    for i, row in enumerate(rows):
        if len(row) != width:
            raise ValueError(f"row {i} has {len(row)} cells; the header has {width}, and every row must have {width} cells")
    if fills is not None and [len(f) for f in fills] != [len(r) for r in rows]:
        raise ValueError("fills must have the rows' shape")
    right = set(numeric)
    head = "".join(f'<th style="{_HEAD}">{_cell(h, raw_html)}</th>' for h in header)

    def td(i: int, j: int, v: Any) -> str:
        fill = fills[i][j] if fills is not None else None
        return (f'<td style="{_CELL}{";text-align:right" if j in right else ""}'
                f'{f";background:{fill}" if fill else ""}">{_cell(v, raw_html)}</td>')
    body = "".join("<tr>" + "".join(td(i, j, v) for j, v in enumerate(row)) + "</tr>" for i, row in enumerate(rows))
    total = sum(widths) if widths else 0
    cols = ("<colgroup>" + "".join(f'<col style="width:{100 * w / total:.1f}%">' for w in widths)
            + "</colgroup>") if total else ""
    caption = (f'<caption style="caption-side:top;text-align:left;font-weight:600;padding:2px 0">'
               f"{html.escape(title)}</caption>") if title else ""
    return (f'<div style="max-width:100%;overflow-x:auto"><table class="{TABLE_CLASS}" style="{_TABLE}">'
            f"{caption}{cols}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>")


@dataclass
class Table:
    """A table that Jupyter shows as html_table (the notebook's last expression, or display(t));
    its header and rows stay readable data for tests."""
    header: list
    rows: list
    title: str | None = None
    raw_html: bool = False
    numeric: Sequence[int] = field(default_factory=tuple)
    fills: Sequence[Sequence[Any]] | None = None
    widths: Sequence[float] | None = None

    def column(self, i: int) -> list:
        return [r[i] for r in self.rows]

    def _repr_html_(self) -> str:
        return html_table(self.header, self.rows, title=self.title, raw_html=self.raw_html, numeric=self.numeric,
                          fills=self.fills, widths=self.widths)

    def _repr_markdown_(self) -> None:   # the HTML is the table; no second rendering
        return None

    def __repr__(self) -> str:
        return "\n".join(" | ".join(str(v) for v in row) for row in [self.header, *self.rows])
