"""Build the notebook that is actually run: the student's cells plus the instructor's checks.

Exercises are matched by id in cell metadata, never by position: the instructor's visible and
hidden check cells are inserted right after the student's solution cell for that id, wherever it
now is. The student's own copies of check cells are dropped, so editing them changes nothing.
"""
from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any

import nbformat

from . import cells, fresh


@dataclass
class Plan:
    """The graded notebook and, per code-cell index, which exercise cell it is."""
    notebook: Any
    roles: dict[int, tuple[str, str]] = field(default_factory=dict)   # code index -> (exercise, role)
    tokens: dict[int, str] = field(default_factory=dict)              # code index -> success token
    missing: set[str] = field(default_factory=set)


def _code_cell(source: str, metadata: dict | None = None) -> Any:
    return nbformat.v4.new_code_cell(source=source, metadata=metadata or {})


def assemble(student_nb: Any, exercises: list[cells.Exercise]) -> Plan:
    """The graded notebook for one submission of a notebook with these exercises."""
    by_id = {e.id: e for e in exercises}
    out_cells: list[Any] = []
    plan = Plan(notebook=None)
    placed: set[str] = set()
    # A cell copied in Jupyter keeps its metadata: with several solution cells for one id, the checks
    # go after the last one, so they see the student's final definitions.
    last: dict[str, int] = {}
    for position, cell in enumerate(student_nb.get("cells", [])):
        if cells.role(cell) == "solution":
            last[cells.meta(cell)["exercise"]] = position
    code_index = 0
    for position, cell in enumerate(student_nb.get("cells", [])):
        kind = cell.get("cell_type")
        if kind != "code":
            out_cells.append(cell)
            continue
        r = cells.role(cell)
        if r in ("check", "hidden"):
            continue
        ex_id = cells.meta(cell)["exercise"] if r == "solution" else None
        new = _code_cell(cells.source_text(cell), dict(cell.get("metadata") or {}))
        out_cells.append(new)
        if ex_id in by_id and last.get(ex_id) == position:
            placed.add(ex_id)
            plan.roles[code_index] = (ex_id, "solution")
            code_index += 1
            ex = by_id[ex_id]
            for r2, sources in (("check", ex.checks), ("hidden", ex.hidden)):
                for src in sources:
                    token = secrets.token_hex(12)
                    out_cells.append(_code_cell(fresh.injected_source(src, ex_id, r2, token)))
                    plan.roles[code_index] = (ex_id, r2)
                    plan.tokens[code_index] = token
                    code_index += 1
        else:
            code_index += 1
    plan.missing = set(by_id) - placed
    nb = nbformat.v4.new_notebook(cells=out_cells, metadata=dict(student_nb.get("metadata") or {}))
    plan.notebook = nb
    return plan
