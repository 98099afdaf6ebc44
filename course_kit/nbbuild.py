"""Build the two builds of every notebook from its one py:percent source `notebooks/src/NN_name.py`.

- The learner's build, `notebooks/NN_name.ipynb` (committed; what the badges open): each exercise's
  solution is a stub raising NotImplementedError("Exercise NN.name: task"), hidden checks are left
  out, and exercise and check cells carry nbval's `raises-exception` tag.
- The solved build (generated, never committed; for instructors and CI): solutions between
  `### BEGIN SOLUTION` and `### END SOLUTION`, hidden checks included.

Sources are plain Python, easy to review and diff. Markers:

    # %% [markdown]            a markdown cell (its lines keep a leading "# ")
    # %%                       a code cell
    # %% {"tags": ["parameters"]}                 any cell may carry JSON metadata
    # %% {"course_kit": {"exercise": "01.x", "role": "solution", "points": 2}}

A line `{{BADGES}}` in a markdown cell becomes the Colab and Binder badges; a line `{{SETUP}}` in a
code cell becomes the standard setup cell. The repository URL comes from pyproject's
`[project.urls] Repository`, its one declaration.

    python -m course_kit.nbbuild [NN ...] [--check]     the learner's build, into notebooks/
    python -m course_kit.nbbuild --solved DIR           the solved build, into DIR (build/solved)
    python -m course_kit.nbbuild --ci DIR               what `make test` runs (see ci_notebook)

The solved build's hidden cells call the instructor's hidden checks: from a checkout they load from
instructor/hidden_checks/ beside the package; where that tree is absent (an installed package) each
prints "hidden check: the instructor's checks are not installed here" and carries on.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = None

PROJECT = Path(__file__).resolve().parents[1]
SOURCES = PROJECT / "notebooks" / "src"
NOTEBOOKS = PROJECT / "notebooks"
MARKER = re.compile(r"^# %%(?:\s+\[(markdown)\])?\s*(\{.*\})?\s*$")


def repository_url() -> str:
    text = (PROJECT / "pyproject.toml").read_text()
    if tomllib is not None:
        return tomllib.loads(text)["project"]["urls"]["Repository"]
    match = re.search(r'^Repository\s*=\s*"([^"]+)"', text, re.M)
    if not match:
        raise ValueError("pyproject.toml has no [project.urls] Repository")
    return match.group(1)


def _github_path(url: str) -> str:
    match = re.match(r"https://github\.com/([^/]+/[^/]+?)(?:\.git)?/?$", url)
    if not match:
        raise ValueError(f"Repository URL must be a GitHub URL for the badges, got {url!r}")
    return match.group(1)


def badges(notebook_name: str, url: str | None = None) -> str:
    """The Colab and Binder badges of a notebook, from the repository URL. While that URL is still the
    placeholder there is nothing to open them from: a line says how to open the notebook on Colab."""
    url = url or repository_url()
    if is_placeholder(url):
        return ("*On Colab:* File → Upload notebook → this `.ipynb`; then run the setup cell below, which "
                "says how to add the course wheel (`make wheel`).")
    repo = _github_path(url)
    colab = f"https://colab.research.google.com/github/{repo}/blob/main/notebooks/{notebook_name}"
    binder = f"https://mybinder.org/v2/gh/{repo}/main?labpath=notebooks%2F{notebook_name}"
    return (f"[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]({colab}) "
            f"[![Binder](https://mybinder.org/badge_logo.svg)]({binder})")


def is_placeholder(url: str | None) -> bool:
    from .colab import is_placeholder as placeholder
    return placeholder(url)


def setup_cell(url: str | None = None) -> str:
    """The standard setup cell. On Colab it finds the course (a clone of the repository once its URL
    is set, else a course wheel the learner uploaded or put in Drive, else it stops with two lines
    saying what to do), then `course_kit.colab.setup` installs it beside Colab's own torch (never
    reinstalled; a re-run does nothing more) and turns on Colab's widget manager."""
    from .colab import CHECKOUT, WHEEL_FOLDERS
    url = url or repository_url()
    repository = "" if is_placeholder(url) else url
    return f'''# Setup. On Colab: install the course once, beside Colab's own torch (never reinstalled; re-running
# this cell does nothing more). Elsewhere the checkout's own install (`make lab`) is used.
import sys
if "google.colab" in sys.modules:
    import glob, os, subprocess
    REPOSITORY = "{repository}"   # pyproject.toml's [project.urls] Repository; empty: not published yet
    CHECKOUT = "{CHECKOUT}"
    if REPOSITORY and not os.path.isdir(CHECKOUT):
        subprocess.run(["git", "clone", "-q", "--depth", "1", REPOSITORY, CHECKOUT])
    wheels = sorted((w for f in {WHEEL_FOLDERS!r} for w in glob.glob(f + "/course_kit-*.whl")),
                    key=os.path.getmtime)   # uploaded to /content, or in My Drive once Drive is mounted
    SOURCE = CHECKOUT if os.path.isdir(CHECKOUT) else (wheels[-1] if wheels else None)
    if SOURCE is None:
        class NoCourse(Exception):
            def _render_traceback_(self):
                return ["No course to install yet. On your machine, `make wheel` builds dist/course_kit-*.whl.",
                        "Here: Files panel (folder icon, left) → Upload → that file (or put it in My Drive "
                        "and click Mount Drive there); then run this cell again."]
        raise NoCourse()
    sys.path.insert(0, SOURCE)   # the checkout, or the wheel itself (Python imports from a zip)
    from course_kit import colab
    colab.setup(SOURCE)

import course_kit
from course_kit import device
print(device.describe())'''


def _cell_id(stem: str, index: int) -> str:
    return hashlib.sha1(f"{stem}:{index}".encode()).hexdigest()[:12]


def parse(source: str) -> list[dict]:
    """Split a py:percent source into cells: {"type", "metadata", "lines"}."""
    cells: list[dict] = []
    current: dict | None = None
    for line in source.splitlines():
        match = MARKER.match(line)
        if match:
            current = {"type": "markdown" if match.group(1) else "code",
                       "metadata": json.loads(match.group(2)) if match.group(2) else {}, "lines": []}
            cells.append(current)
        elif current is None:
            if line.strip():
                raise ValueError(f"text before the first '# %%' marker: {line!r}")
        else:
            current["lines"].append(line)
    return cells


def _strip_blank_edges(lines: list[str]) -> list[str]:
    while lines and not lines[0].strip():
        lines = lines[1:]
    while lines and not lines[-1].strip():
        lines = lines[:-1]
    return lines


def _markdown_text(lines: list[str]) -> str:
    out = []
    for line in lines:
        if line.startswith("# "):
            out.append(line[2:])
        elif line.startswith("#"):
            out.append(line[1:])
        elif not line.strip():
            out.append("")
        else:
            raise ValueError(f"markdown line must start with '#': {line!r}")
    return "\n".join(_strip_blank_edges(out))


def build_solved(src: Path) -> dict:
    """The solved build (for instructors and CI): every cell of the source, solutions between their
    BEGIN/END SOLUTION markers, hidden checks included."""
    name = src.stem + ".ipynb"
    cells = []
    for index, cell in enumerate(parse(src.read_text())):
        if cell["type"] == "markdown":
            text = _markdown_text(cell["lines"]).replace("{{BADGES}}", badges(name))
        else:
            text = "\n".join(_strip_blank_edges(cell["lines"])).replace("{{SETUP}}", setup_cell())
        nb_cell = {"cell_type": cell["type"], "id": _cell_id(src.stem, index),
                   "metadata": cell["metadata"], "source": text.splitlines(keepends=True)}
        if cell["type"] == "code":
            nb_cell.update(execution_count=None, outputs=[])
        cells.append(nb_cell)
    return {
        "cells": cells,
        "metadata": {
            "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


_TASK = re.compile(r"^#+\s*Exercise\b\s*(\d\d\.[\w\-]+)?\s*:\s*(.+?)\s*$", re.M)
RAISES = "raises-exception"   # nbval's tag for a cell allowed to raise


def exercise_task(nb: dict, index: int, exercise_id: str) -> str:
    """The one-line task of the exercise whose solution cell is cells[index]: the cell's
    `course_kit.task` metadata, else the nearest markdown heading "Exercise [NN.name]: task" above it."""
    cell = nb["cells"][index]
    task = (cell.get("metadata", {}).get("course_kit") or {}).get("task")
    if task:
        return " ".join(str(task).split())
    for above in reversed(nb["cells"][:index]):
        if above["cell_type"] != "markdown":
            continue
        found = [m for m in _TASK.finditer("".join(above["source"])) if m.group(1) in (None, exercise_id)]
        if found:
            return found[-1].group(2)
    return "see the task above"


def _release_notebook():
    from .grading.instructor.release import release_notebook
    return release_notebook


def learner(solved: dict) -> dict:
    """The learner's build from the solved one: each solution region becomes a stub raising
    NotImplementedError("Exercise NN.name: task"), hidden cells go, and exercise and check cells are
    tagged `raises-exception` (nbval accepts their error; every other cell must run clean)."""
    from .grading.instructor import cells as ex_cells
    tasks = {ex_cells.meta(c)["exercise"]: exercise_task(solved, i, ex_cells.meta(c)["exercise"])
             for i, c in enumerate(solved["cells"]) if ex_cells.role(c) == "solution"}
    out, _ = _release_notebook()(solved, keep_solutions=False)
    for cell in out["cells"]:
        role = ex_cells.role(cell)
        text = ex_cells.source_text(cell)
        if role == "solution":
            ex_id = ex_cells.meta(cell)["exercise"]
            stub = f'NotImplementedError("Exercise {ex_id}")'
            text = text.replace(stub, f"NotImplementedError({json.dumps(f'Exercise {ex_id}: {tasks[ex_id]}')})")
        if role in ("solution", "check"):
            tags = cell["metadata"].setdefault("tags", [])
            if RAISES not in tags:
                tags.append(RAISES)
        cell["source"] = text.splitlines(keepends=True)
    return out


def build(src: Path, solved: bool = False) -> dict:
    """The notebook (as nbformat JSON) for one source file: the learner's build (what notebooks/
    holds and the badges open), or with solved=True the solved build."""
    nb = build_solved(src)
    return nb if solved else learner(nb)


def first_exercise(nb: dict) -> int | None:
    """Index of the first exercise cell; the cells before it are the same in both builds."""
    return next((i for i, c in enumerate(nb["cells"]) if (c.get("metadata") or {}).get("course_kit")), None)


def ci_notebook(src: Path) -> dict:
    """What `make test` runs for one notebook: the learner's build top to bottom, then, in the same
    kernel, the solved build's cells from its first exercise on, hidden checks included. Both builds
    share every cell before the first exercise (tests/test_nbbuild.py checks it), so this runs every
    cell of both builds, the solved one top to bottom, while running the long shared part once. The
    hidden checks run because `make test` runs in a checkout, whose instructor/hidden_checks/ the
    grading package finds beside itself (issue 47)."""
    solved, learn = build_solved(src), build(src)
    start = first_exercise(solved)
    if start is None:
        return learn
    marker = {"cell_type": "markdown", "id": "solved-build", "metadata": {},
              "source": ["## The solved build, from its first exercise on (CI only)"]}
    tail = [{**c, "id": f"solved-{c['id']}"} for c in solved["cells"][start:]]
    return {**learn, "cells": learn["cells"] + [marker] + tail}


def write_solved(folder: Path, selectors: list[str] | None = None) -> list[Path]:
    """Write the solved build of the selected notebooks (default all) into `folder`: the instructor
    notebooks that `course-kit release` and `grade` take as their source."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for src in sources(selectors):
        target = folder / (src.stem + ".ipynb")
        target.write_text(_dump(build(src, solved=True)))
        written.append(target)
    return written


def render(src: Path, solved: bool = False) -> str:
    return json.dumps(build(src, solved), indent=1, ensure_ascii=False) + "\n"


def _dump(nb: dict) -> str:
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def sources(selectors: list[str] | None = None) -> list[Path]:
    found = sorted(SOURCES.glob("[0-9][0-9]_*.py"))
    if selectors:
        found = [p for p in found if any(p.stem.startswith(s) for s in selectors)]
        if not found:
            raise ValueError(f"no notebook source matches {selectors}; have {[p.stem for p in SOURCES.glob('*.py')]}")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_kit.nbbuild", description=__doc__.split("\n")[0])
    parser.add_argument("selectors", nargs="*", help="notebook numbers or name prefixes (default: all)")
    parser.add_argument("--check", action="store_true", help="fail if a learner notebook is out of date")
    parser.add_argument("--solved", metavar="DIR", help="write the solved build into DIR instead")
    parser.add_argument("--ci", metavar="DIR", help="write what make test runs (learner build, then the "
                        "solved build's exercises) into DIR instead")
    args = parser.parse_args(argv)
    if args.solved:
        print(f"built {len(write_solved(Path(args.solved), args.selectors))} solved notebooks into {args.solved}")
        return 0
    if args.ci:
        folder = Path(args.ci)
        folder.mkdir(parents=True, exist_ok=True)
        for src in sources(args.selectors):
            (folder / (src.stem + ".ipynb")).write_text(_dump(ci_notebook(src)))
        print(f"built {len(sources(args.selectors))} notebooks into {folder}")
        return 0
    stale = []
    for src in sources(args.selectors):
        target = NOTEBOOKS / (src.stem + ".ipynb")
        text = render(src)
        if target.is_file() and target.read_text() == text:
            continue
        if args.check:
            stale.append(target.name)
        else:
            target.write_text(text)
            print(f"built {target.relative_to(PROJECT)}")
    if stale:
        print(f"out of date (run python -m course_kit.nbbuild): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
