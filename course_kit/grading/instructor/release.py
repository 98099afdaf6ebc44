"""Instructor -> student release: solutions stubbed, hidden checks dropped, outputs cleared.

The result depends only on the instructor notebooks (no dates, sorted JSON), so releasing twice
gives byte-identical files.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import nbformat

from . import cells

MANIFEST = "manifest.json"


def course_notebooks(source_dir: Path) -> list[Path]:
    """The course's notebooks in a folder: `NN_name.ipynb`, sorted."""
    return sorted(p for p in Path(source_dir).glob("[0-9][0-9]_*.ipynb") if p.is_file())


def release_notebook(nb: Any, keep_solutions: bool = False) -> tuple[Any, list[cells.Exercise]]:
    """The student version of one instructor notebook and its exercises. With keep_solutions, the
    solutions stay in (markers removed): a perfect submission, for testing the grader."""
    exercises = cells.exercises(nb)
    out = copy.deepcopy(nb)
    kept = []
    for cell in out["cells"]:
        r = cells.role(cell)
        if r == "hidden":
            continue
        if cell.get("cell_type") == "code":
            text = cells.source_text(cell)
            if r == "solution":
                text = cells.strip_solution(text, cells.meta(cell)["exercise"], keep=keep_solutions)
            elif cells.BEGIN in text:
                raise ValueError(f"a code cell holds {cells.BEGIN!r} but is not marked as a solution cell; "
                                 f"it would leak: {text[:80]!r}")
            cell["source"] = text
            cell["outputs"] = []
            cell["execution_count"] = None
        kept.append(cell)
    out["cells"] = kept
    return out, exercises


def release(source_dir: Path, out_dir: Path) -> dict:
    """Write the student notebooks and `manifest.json` to `out_dir`; return the manifest."""
    source_dir, out_dir = Path(source_dir), Path(out_dir)
    notebooks = course_notebooks(source_dir)
    if not notebooks:
        raise ValueError(f"no course notebooks (NN_name.ipynb) in {source_dir}")
    out_dir.mkdir(parents=True, exist_ok=True)
    manifest: dict = {"format": 1, "notebooks": [], "total_points": 0}
    for path in notebooks:
        nb = nbformat.read(str(path), as_version=4)
        student, exercises = release_notebook(nb)
        (out_dir / path.name).write_text(nbformat.writes(student))
        points = sum(e.points for e in exercises)
        manifest["notebooks"].append({
            "notebook": path.name, "points": points,
            "exercises": [{"id": e.id, "points": e.points, "hidden_checks": len(e.hidden)} for e in exercises],
        })
        manifest["total_points"] += points
    (out_dir / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return manifest
