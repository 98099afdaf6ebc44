"""The checkers of every notebook's exercises, by id ("01.bf16_round"), and how each is probed.

A checker is registered with `@exercise(id, hint=..., cases=...)`:

- without `cases`, the values passed to `check(id, *values)` are the answer; they travel as data
  and the checker receives them decoded (`checker(*values)`);
- with `cases` (a function returning a list of argument tuples), the first value is the learner's
  function (or class, with `instantiate=True`): it is called on every case where it lives, and the
  checker receives a stand-in that replays the recorded outputs (`checker(fn, *rest)`). Every call
  the checker makes must be one of its cases; make cases deterministic (seeded), since the grader
  computes them once for the sandbox and again in the checker's process;
- `probe="module:function"` (a public function under course_kit.grading.checks) replaces the plain
  calls where an answer needs more than calls (exporting a module, several ranks); it returns data
  and the checker receives a `Probed` holding it;
- `source=True` passes the learner's submitted source (`source=` keyword) for checks on the text;
- `later="CAUSE"` names a part the public checker only checks for form: its answer lives in the
  hidden checker alone (a multiple-choice letter a learner could otherwise read in this package);
- `keyed="BATCH and FP8"` names the parts whose right values only the instructor's answer key holds
  (`answer_key(id, ...)` in the instructor's tree, read with `key(id)`): without it (a learner's
  installed package) the public checker checks their form and the pass line says they are judged
  when the instructor grades; with it (the grader's checkers, a checkout that has the instructor's
  tree) it compares them too. So no value a student is graded on ships in the package.

Checkers raise `feedback.Wrong`; public ones live in checks/nbNN.py, hidden ones and answer keys in
the instructor's tree (instructor/hidden_checks/), which learners never install. Where that tree
sits beside the package (a checkout), `get` and `key` load its module of the notebook at hand, so
the solved build's hidden cells run there; a sandboxed run (COURSE_KIT_GRADE set) never looks.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import pkgutil
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

ID = re.compile(r"\A\d\d\.[A-Za-z0-9_\-]{1,60}\Z")   # \Z: "$" would accept a trailing newline


@dataclass
class Spec:
    id: str
    checker: Callable[..., Any]
    hint: str = ""
    cases: Callable[[], list] | None = None
    instantiate: bool = False
    probe: str | None = None
    source: bool = False
    later: str = ""          # what only the instructor's hidden check judges (a multiple-choice letter)
    keyed: str = ""          # what only the instructor's answer key lets the checker compare


SPECS: dict[str, Spec] = {}
KEYS: dict[str, dict] = {}
_INSTRUCTOR: list = []       # [the instructor's hidden_checks folder, or None], once decided


def exercise(exercise_id: str, *, hint: str = "", cases: Callable[[], list] | None = None,
             instantiate: bool = False, probe: str | None = None, source: bool = False,
             later: str = "", keyed: str = "") -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the checker of one exercise id (see the module docstring for the arguments)."""
    if not ID.match(exercise_id):
        raise ValueError(f"exercise id {exercise_id!r} must look like 'NN.name'")
    if probe is not None and not probe.startswith("course_kit.grading.checks."):
        raise ValueError(f"probe {probe!r} must be a public function under course_kit.grading.checks")

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        SPECS[exercise_id] = Spec(exercise_id, fn, hint.strip(), cases, instantiate, probe, source, later, keyed)
        return fn
    return register


def load_public(exercise_id: str | None = None, everything: bool = True) -> None:
    """Import checker modules: the exercise's own notebook module first (cheap), else (everything)
    all of them."""
    from course_kit.grading import checks
    if exercise_id and exercise_id[:2].isdigit():
        try:
            importlib.import_module(f"{checks.__name__}.nb{exercise_id[:2]}")
        except ModuleNotFoundError as exc:
            if not exc.name or not exc.name.endswith(f"nb{exercise_id[:2]}"):
                raise
        if exercise_id in SPECS or not everything:
            return
    for info in pkgutil.iter_modules(checks.__path__):
        if info.name.startswith("nb"):
            importlib.import_module(f"{checks.__name__}.{info.name}")


def load_hidden(folder: Path, notebooks: set[str] | None = None) -> None:
    """Import the hidden checker modules of the instructor's folder (by path, not by package):
    all of them, or only nbNN.py for the notebook numbers NN given."""
    for path in sorted(Path(folder).glob("*.py")):
        if notebooks is not None and path.stem[2:4] not in notebooks:
            continue
        name = f"_course_kit_hidden_{path.stem}"
        if name in sys.modules:
            continue
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]       # a module that failed to load is not taken as loaded
            raise


def _beside_package() -> Path | None:
    """instructor/hidden_checks/ of the checkout this package sits in, if any (never in a sandboxed
    run: it is not mounted there, and the run must not go looking)."""
    if os.environ.get("COURSE_KIT_GRADE"):
        return None
    root = Path(__file__).resolve().parents[3]
    folder = root / "instructor" / "hidden_checks"
    return folder if folder.is_dir() and (root / "pyproject.toml").is_file() else None


def instructor_folder() -> Path | None:
    """The instructor's hidden checks: the folder given to `use_instructor`, else the one beside the
    package (a checkout), else None (a learner's installed package)."""
    if not _INSTRUCTOR:
        _INSTRUCTOR.append(_beside_package())
    return _INSTRUCTOR[0]


def use_instructor(folder: Path | None) -> None:
    """Take the instructor's hidden checks from this folder (None: none at all), not from beside the
    package (the grader's checkers' process, with `--hidden`)."""
    _INSTRUCTOR[:] = [Path(folder) if folder else None]


def _load_instructor(exercise_id: str) -> None:
    folder = instructor_folder()
    if folder is not None and exercise_id[:2].isdigit():
        load_hidden(folder, {exercise_id[:2]})


def answer_key(exercise_id: str, **values: Any) -> None:
    """Register the values a student is graded on for an exercise (the instructor's tree only)."""
    if not ID.match(exercise_id):
        raise ValueError(f"exercise id {exercise_id!r} must look like 'NN.name'")
    KEYS[exercise_id] = dict(values)


def key(exercise_id: str) -> dict | None:
    """The instructor's answer key of an exercise, or None where the instructor's tree is not at hand."""
    if exercise_id not in KEYS:
        _load_instructor(exercise_id)
    return KEYS.get(exercise_id)


def get(exercise_id: str) -> Spec:
    if not isinstance(exercise_id, str):
        raise ValueError(f"exercise id must be a string like '01.bf16_round', got {type(exercise_id).__name__}")
    if exercise_id not in SPECS:      # its notebook's public module, then the instructor's, then all
        load_public(exercise_id, everything=False)
    if exercise_id not in SPECS:
        _load_instructor(exercise_id)
    if exercise_id not in SPECS:
        load_public(exercise_id)
    if exercise_id not in SPECS:
        raise ValueError(f"unknown exercise {exercise_id!r}; known: {sorted(SPECS)}")
    return SPECS[exercise_id]


def is_hidden(exercise_id: str) -> bool:
    """Is this the id of a hidden check (the course's convention: 'NN.name_hidden')?"""
    return isinstance(exercise_id, str) and bool(ID.match(exercise_id)) and exercise_id.endswith("_hidden")


def probe_function(path: str) -> Callable[..., Any]:
    """The public probe function named 'course_kit.grading.checks.module:function'."""
    module, _, name = path.partition(":")
    if not module.startswith("course_kit.grading.checks.") or not name.isidentifier():
        raise ValueError(f"probe {path!r} is not a public checks function")
    return getattr(importlib.import_module(module), name)
