"""Reading submissions as hostile files (used by grade.py).

Only regular files inside the student's own folder are read: the folder is walked without following
symbolic links, a file with another name elsewhere (a hard link) is refused like a symbolic link,
the chosen file is opened with O_NOFOLLOW and checked again after opening, and its size is capped. A notebook is parsed as plain JSON into the few fields grading needs; anything
malformed is a `Malformed` with a one-line reason that never quotes the file's content.
"""
from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from .cells import BEGIN, ID, ROLES

MAX_BYTES = 20 << 20
MAX_DEPTH, MAX_ENTRIES = 6, 10_000


class Malformed(ValueError):
    """A submission that cannot be graded; the message is one line and quotes nothing from it."""


@dataclass
class Cell:
    kind: str
    source: str
    exercise: str | None = None
    role: str | None = None


@dataclass
class Notebook:
    name: str
    cells: list[Cell]
    text: str = field(repr=False, default="")


def find(student_dir: Path, name: str) -> Path | None:
    """The student's copy of a course notebook: same name, else same NN_ prefix (shallowest, then by
    name); symbolic links are never followed, checkpoints and hidden folders are skipped. A link
    named like the notebook is returned (so it is reported), not followed."""
    exact, prefixed, seen = [], [], 0
    stack = [(Path(student_dir), 0)]
    while stack:
        folder, depth = stack.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            seen += 1
            if seen > MAX_ENTRIES:
                break
            if entry.name.startswith(".") or entry.name == "__pycache__":
                continue
            if entry.is_dir(follow_symlinks=False):
                if depth < MAX_DEPTH:
                    stack.append((Path(entry.path), depth + 1))
            elif entry.name == name:
                exact.append((depth, entry.path))
            elif entry.name.startswith(name[:3]) and entry.name.endswith(".ipynb"):
                prefixed.append((depth, entry.path))
    best = sorted(exact) or sorted(prefixed)
    return Path(best[0][1]) if best else None


def linked(name: str) -> str:
    """The one reason for a submission that is a link: a symbolic link, or a hard link (a file with
    another name elsewhere, e.g. a peer's notebook), which is refused the same way."""
    return f"{name} is a link (symbolic or hard); only files that are not links are graded"


def too_big(name: str, size: int | None, cap: int) -> str:
    """The one size message (MiB, the unit said once)."""
    shown = f"{size / 2**20:.1f} of " if size is not None else ""
    return f"{name} is over the size cap ({shown}at most {cap / 2**20:g} MiB)"


def _plain(info: os.stat_result, name: str) -> None:
    if stat.S_ISLNK(info.st_mode) or (stat.S_ISREG(info.st_mode) and info.st_nlink > 1):
        raise Malformed(linked(name))
    if not stat.S_ISREG(info.st_mode):
        raise Malformed(f"{name} is not a regular file")


def read_bytes(path: Path, max_bytes: int = MAX_BYTES) -> bytes:
    """The file's bytes if it is a regular file that is no link (symbolic or hard) of at most
    max_bytes, else Malformed. Checked before opening and again on the open file."""
    info = os.lstat(path)
    _plain(info, path.name)
    if info.st_size > max_bytes:
        raise Malformed(too_big(path.name, info.st_size, max_bytes))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise Malformed(f"{path.name} could not be opened ({exc.strerror})") from None
    try:
        _plain(os.fstat(fd), path.name)       # the file opened is the one checked (no swap between)
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(max_bytes + 1)
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise Malformed(too_big(path.name, None, max_bytes))
    return data


def _text(value: object, what: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "".join(value)
    raise Malformed(f"{what} is not text (found {type(value).__name__})")


def parse(data: bytes, name: str) -> Notebook:
    """The cells of a notebook file, checked field by field (nbformat 4 only)."""
    try:
        nb = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise Malformed(f"{name} is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise Malformed(f"{name} is not valid JSON (line {exc.lineno})") from None
    except RecursionError:
        raise Malformed(f"{name} is nested too deeply") from None
    if not isinstance(nb, dict):
        raise Malformed(f"{name} is not a notebook (its JSON is a {type(nb).__name__})")
    major = nb.get("nbformat")
    if major != 4:
        raise Malformed(f"{name} has nbformat {major!r:.10}; only nbformat 4 notebooks are graded "
                        "(open and save it in a current Jupyter)")
    raw_cells = nb.get("cells")
    if not isinstance(raw_cells, list):
        raise Malformed(f"{name} has no list of cells")
    cells = []
    for i, raw in enumerate(raw_cells):
        where = f"{name}, cell {i + 1}"
        if not isinstance(raw, dict) or not isinstance(raw.get("cell_type"), str):
            raise Malformed(f"{where} is not a cell")
        meta = raw.get("metadata", {})
        if not isinstance(meta, dict):
            raise Malformed(f"{where}: its metadata is not a mapping")
        cell = Cell(raw["cell_type"], _text(raw.get("source", ""), f"{where}: its source"))
        info = meta.get("course_kit")
        if info is not None and cell.kind == "code":
            if not isinstance(info, dict):
                raise Malformed(f"{where}: course_kit metadata is not a mapping")
            ex, role = info.get("exercise"), info.get("role")
            if not (isinstance(ex, str) and ID.match(ex)):
                raise Malformed(f"{where}: the exercise id in its metadata is not 'NN.name' "
                                f"(found a {type(ex).__name__})")
            if role not in ROLES:
                raise Malformed(f"{where}: role in its metadata is not one of {ROLES}")
            cell.exercise, cell.role = ex, role
        cells.append(cell)
    return Notebook(name, cells)


def load(path: Path, max_bytes: int = MAX_BYTES) -> Notebook:
    """Read and parse one submitted notebook (Malformed on anything wrong)."""
    data = read_bytes(path, max_bytes)
    nb = parse(data, path.name)
    nb.text = data.decode("utf-8")
    return nb


__all__ = ["BEGIN", "Cell", "Malformed", "Notebook", "find", "linked", "load", "parse", "read_bytes",
           "too_big", "MAX_BYTES"]
