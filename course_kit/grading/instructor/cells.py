"""The exercise cell convention shared by release and grade.

A code cell belongs to an exercise through its metadata:
    {"course_kit": {"exercise": "NN.name", "role": "solution" | "check" | "hidden", "points": P}}
Points sit on the solution cell. The solution is the region between `### BEGIN SOLUTION` and
`### END SOLUTION` inside that cell.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Any

ROLES = ("solution", "check", "hidden")
BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"
ID = re.compile(r"\A\d\d\.[A-Za-z0-9_\-]{1,60}\Z")   # \Z: "$" would accept a trailing newline
_ID = ID


def source_text(cell: Any) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


def meta(cell: Any) -> dict | None:
    """The cell's course_kit exercise metadata, or None for an ordinary cell."""
    info = (cell.get("metadata") or {}).get("course_kit")
    if not isinstance(info, dict) or "exercise" not in info:
        return None
    return info


def role(cell: Any) -> str | None:
    info = meta(cell)
    return None if info is None or cell.get("cell_type") != "code" else info.get("role")


@dataclass
class Exercise:
    """One exercise of an instructor notebook: its points and its check and hidden cells' sources."""
    id: str
    points: float
    checks: list[str] = field(default_factory=list)
    hidden: list[str] = field(default_factory=list)


def exercises(nb: Any) -> list[Exercise]:
    """The exercises of an instructor notebook, in the order of their solution cells."""
    found: dict[str, Exercise] = {}
    for cell in nb["cells"]:
        info = meta(cell)
        if info is None or cell.get("cell_type") != "code":
            continue
        ex_id, r = info["exercise"], info.get("role")
        if not _ID.match(str(ex_id)):
            raise ValueError(f"exercise id {ex_id!r} must look like 'NN.name' (two digits, a dot, a name)")
        if r not in ROLES:
            raise ValueError(f"exercise {ex_id}: role {r!r} is not one of {ROLES}")
        if r == "solution":
            if ex_id in found:
                raise ValueError(f"exercise {ex_id} has two solution cells")
            points = info.get("points", 1)
            if not isinstance(points, (int, float)) or points < 0:
                raise ValueError(f"exercise {ex_id}: points {points!r} must be a number >= 0")
            found[ex_id] = Exercise(ex_id, points)
    for cell in nb["cells"]:
        r = role(cell)
        if r in ("check", "hidden"):
            ex_id = meta(cell)["exercise"]
            if ex_id not in found:
                raise ValueError(f"{r} cell of exercise {ex_id} has no solution cell")
            (found[ex_id].checks if r == "check" else found[ex_id].hidden).append(source_text(cell))
    return list(found.values())


def strip_solution(source: str, exercise_id: str, keep: bool = False) -> str:
    """Replace every BEGIN/END SOLUTION region by `raise NotImplementedError("Exercise <id>")`;
    with keep=True, keep the solution and drop only the marker lines (a solved student copy)."""
    lines, out, inside, indent, seen = source.splitlines(), [], False, "", False
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        if stripped.startswith(BEGIN):
            if inside:
                raise ValueError(f"exercise {exercise_id}: nested {BEGIN!r} on line {number}")
            inside, seen = True, True
            indent = line[: len(line) - len(line.lstrip())]
            if not keep:
                out.append(f'{indent}raise NotImplementedError("Exercise {exercise_id}")')
        elif stripped.startswith(END):
            if not inside:
                raise ValueError(f"exercise {exercise_id}: {END!r} without {BEGIN!r} on line {number}")
            inside = False
        elif not inside or keep:
            out.append(line)
    if inside:
        raise ValueError(f"exercise {exercise_id}: {BEGIN!r} is never closed by {END!r}")
    if not seen:
        raise ValueError(f"exercise {exercise_id}: solution cell has no {BEGIN!r} ... {END!r} region")
    return "\n".join(out)


def check_ids(source: str, where: str = "a check cell") -> list[str]:
    """The exercise ids a check (or hidden) cell checks. Such a cell may only import and call
    `check("NN.name", answer, ...)` (as `check`, `grading.check` or `course_kit.grading.check`):
    the verdict is made by the checker's own process, so nothing else in the cell could count."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise ValueError(f"{where} is not valid Python: {exc.msg}") from None
    ids = []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        call = node.value if isinstance(node, ast.Expr) else None
        func = call.func if isinstance(call, ast.Call) else None
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        first = call.args[0] if isinstance(call, ast.Call) and call.args else None
        if name != "check" or not (isinstance(first, ast.Constant) and isinstance(first.value, str)) \
                or not ID.match(first.value):
            raise ValueError(f"{where}: line {node.lineno} is not a call of grading.check('NN.name', ...); "
                             "check cells may only call the checker (the verdict is made outside the notebook)")
        ids.append(first.value)
    if not ids:
        raise ValueError(f"{where} calls no grading.check('NN.name', ...)")
    return ids
