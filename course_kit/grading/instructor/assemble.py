"""The cells that are actually run for one submission: the student's code cells, with the
instructor's check cells inserted after the student's solution cell of each exercise.

Exercises are matched by id in cell metadata, never by position. The student's own copies of check
cells are dropped, so editing them changes nothing. Two solution cells for one id make that
exercise an error (which one counts would be a guess); its checks are not run.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .cells import Exercise, check_ids
from .submissions import Notebook

PRELUDE = "import course_kit\nfrom course_kit import grading\n"


@dataclass
class Step:
    code: str
    exercise: str | None = None     # the exercise this cell belongs to
    role: str | None = None         # "solution", "check" or "hidden"


@dataclass
class Plan:
    steps: list[Step] = field(default_factory=list)
    checks: dict[str, list[str]] = field(default_factory=dict)     # exercise -> check ids
    sources: dict[str, str] = field(default_factory=dict)          # exercise -> submitted solution
    missing: set[str] = field(default_factory=set)
    duplicated: set[str] = field(default_factory=set)


def exercise_checks(exercises: list[Exercise], notebook: str) -> dict[str, list[tuple[str, list[str]]]]:
    """Per exercise, its (role, check ids) cells, validated (ValueError names the bad cell)."""
    out = {}
    for ex in exercises:
        cells = [("check", src) for src in ex.checks] + [("hidden", src) for src in ex.hidden]
        out[ex.id] = [(role, check_ids(src, f"{notebook}: a {role} cell of {ex.id}")) for role, src in cells]
    return out


def assemble(nb: Notebook, exercises: list[Exercise]) -> Plan:
    """The plan for one submission of a notebook with these exercises."""
    plan = Plan()
    by_id = {e.id: e for e in exercises}
    wanted = {e.id for e in exercises}
    solution_cells: dict[str, list[int]] = {}
    for i, cell in enumerate(nb.cells):
        if cell.kind == "code" and cell.role == "solution":
            solution_cells.setdefault(cell.exercise, []).append(i)
    plan.duplicated = {ex for ex, found in solution_cells.items() if len(found) > 1 and ex in wanted}
    plan.missing = wanted - set(solution_cells)
    for i, cell in enumerate(nb.cells):
        if cell.kind != "code" or cell.role in ("check", "hidden"):
            continue
        ex = cell.exercise if cell.role == "solution" and cell.exercise in wanted else None
        plan.steps.append(Step(cell.source, ex, "solution" if ex else None))
        if ex is None or ex in plan.duplicated:
            continue
        plan.sources[ex] = cell.source
        cells = [("check", src) for src in by_id[ex].checks] + [("hidden", src) for src in by_id[ex].hidden]
        plan.checks[ex] = [i for _, src in cells for i in check_ids(src)]
        for role, source in cells:
            plan.steps.append(Step(PRELUDE + source, ex, role))
    return plan
