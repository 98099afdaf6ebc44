"""Build `notebooks/NN_name.ipynb` from its py:percent source `notebooks/src/NN_name.py`.

Sources are plain Python, easy to review and diff; the notebooks are what learners open. Markers:

    # %% [markdown]            a markdown cell (its lines keep a leading "# ")
    # %%                       a code cell
    # %% {"tags": ["parameters"]}                 any cell may carry JSON metadata
    # %% {"course_kit": {"exercise": "01.x", "role": "solution", "points": 2}}

A line `{{BADGES}}` in a markdown cell becomes the Colab and Binder badges; a line `{{SETUP}}` in a
code cell becomes the standard setup cell. The repository URL comes from pyproject's
`[project.urls] Repository`, its one declaration.

    python -m course_kit.nbbuild [NN ...] [--check]
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
    repo = _github_path(url or repository_url())
    colab = f"https://colab.research.google.com/github/{repo}/blob/main/notebooks/{notebook_name}"
    binder = f"https://mybinder.org/v2/gh/{repo}/main?labpath=notebooks%2F{notebook_name}"
    return (f"[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]({colab}) "
            f"[![Binder](https://mybinder.org/badge_logo.svg)]({binder})")


def setup_cell(url: str | None = None) -> str:
    url = url or repository_url()
    return f'''# Setup. On Colab: fetch the course and install it beside Colab's own torch, which is pinned by a
# constraint so it is never reinstalled. Elsewhere the checkout's own install (`make lab`) is used.
import os, subprocess, sys
if "google.colab" in sys.modules:
    CHECKOUT = "/content/course-kit"
    if not os.path.isdir(CHECKOUT):
        subprocess.run(["git", "clone", "--depth", "1", "{url}", CHECKOUT], check=True)
        import torch
        with open("/tmp/keep-torch.txt", "w") as f:
            f.write(f"torch=={{torch.__version__}}\\n")
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-e", CHECKOUT,
                        "-c", "/tmp/keep-torch.txt"], check=True)
    sys.path.insert(0, CHECKOUT)
    os.chdir(os.path.join(CHECKOUT, "notebooks"))

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


def build(src: Path) -> dict:
    """The notebook (as nbformat JSON) for one source file."""
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


def render(src: Path) -> str:
    return json.dumps(build(src), indent=1, ensure_ascii=False) + "\n"


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
    parser.add_argument("--check", action="store_true", help="fail if a notebook is out of date")
    args = parser.parse_args(argv)
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
