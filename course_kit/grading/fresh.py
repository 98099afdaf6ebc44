"""Run an instructor check with a private copy of the grading package.

Injected check cells load this file by path (never through `import`), so a student who replaced
`course_kit.grading.check`, its registry or a checker function has changed nothing this uses.
On success the cell prints a per-cell token that the grader requires; a cell whose output lacks it
does not count as passed.
"""
from __future__ import annotations

import contextlib
import importlib.util
import sys
import types
import uuid
from pathlib import Path
from typing import Any

GRADING_DIR = Path(__file__).resolve().parent
TOKEN_PREFIX = "course_kit-grade-ok"


def private_grading() -> types.ModuleType:
    """A freshly executed copy of course_kit.grading (its checkers load from file when first used)."""
    name = f"_course_kit_grading_{uuid.uuid4().hex}"
    spec = importlib.util.spec_from_file_location(name, GRADING_DIR / "__init__.py",
                                                  submodule_search_locations=[str(GRADING_DIR)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def _as_course_kit_grading(module: types.ModuleType):
    """While a check runs, `from course_kit import grading` (in checker files) means the private copy."""
    import course_kit
    saved_attr = course_kit.__dict__.get("grading")
    saved_mod = sys.modules.get("course_kit.grading")
    course_kit.grading = module
    sys.modules["course_kit.grading"] = module
    try:
        yield
    finally:
        if saved_attr is None:
            course_kit.__dict__.pop("grading", None)
        else:
            course_kit.grading = saved_attr
        if saved_mod is None:
            sys.modules.pop("course_kit.grading", None)
        else:
            sys.modules["course_kit.grading"] = saved_mod


class _CourseKitView(types.ModuleType):
    """`course_kit` as seen by a check cell: the real package, except `grading` is the private copy."""

    def __init__(self, real: types.ModuleType, grading: types.ModuleType):
        super().__init__("course_kit")
        self.__dict__["_real"], self.__dict__["grading"] = real, grading

    def __getattr__(self, item: str) -> Any:
        return getattr(self.__dict__["_real"], item)


def run_check(source: str, user_globals: dict, token: str, label: str = "check") -> None:
    """Execute one check cell's source against the learner's variables, then print the token."""
    grading = private_grading()
    import course_kit
    namespace = dict(user_globals)
    namespace.update(course_kit=_CourseKitView(course_kit, grading), grading=grading, check=grading.check)
    with _as_course_kit_grading(grading):
        exec(compile(source, f"<{label}>", "exec"), namespace)
    print(f"{TOKEN_PREFIX} {token}")


def injected_source(source: str, exercise_id: str, role: str, token: str) -> str:
    """The code of an injected check cell: load this file by path and run the check through it."""
    label = f"{role} check of exercise {exercise_id}"
    return "\n".join([
        f"# course_kit grading: {label}",
        "import importlib.util as _ck_util",
        f"_ck_spec = _ck_util.spec_from_file_location('_ck_fresh_{token}', {str(Path(__file__).resolve())!r})",
        "_ck_fresh = _ck_util.module_from_spec(_ck_spec)",
        "_ck_spec.loader.exec_module(_ck_fresh)",
        "del _ck_util, _ck_spec",
        f"_ck_fresh.run_check({source!r}, globals(), {token!r}, {label!r})",
    ])
