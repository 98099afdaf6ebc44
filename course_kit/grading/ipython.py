"""What a learner's notebook shows when a check cell runs before its exercise is answered.

A check cell such as `grading.check("00.decode_batch", PREDICTED_BATCH, BATCH, FP8)` names values the
learner's solution cell defines; run before that cell is answered, it raises a NameError, whose raw
traceback says nothing useful. `install()` (called when course_kit.grading is imported inside
IPython) registers a handler for NameError that, for a check cell only, shows one line instead:

    ✗ Exercise 00.decode_batch: answer the exercise above first (BATCH is not defined yet)

The cell still fails (so nbval's `raises-exception` tag and the grader see an error); every other
NameError gets IPython's usual traceback. Nothing is installed when grading (the grader's kernel
scores an unanswered exercise by its NotImplementedError) or where a handler is already set.
"""
from __future__ import annotations

import ast
import linecache
import os
import sys
from typing import Any


def _check_call_names(source: str) -> tuple[str, set[str]] | None:
    """(first exercise id, names its check calls take as answers) if `source` is a check cell: only
    imports and calls of check("NN.name", ...); else None."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    first, names = None, set()
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        call = node.value if isinstance(node, ast.Expr) else None
        func = getattr(call, "func", None)
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        args = getattr(call, "args", [])
        if name != "check" or not args or not isinstance(args[0], ast.Constant) or not isinstance(args[0].value, str):
            return None
        first = first or args[0].value
        names |= {n.id for a in args[1:] for n in ast.walk(a) if isinstance(n, ast.Name)}
    return (first, names) if first else None


def _answer_first(shell: Any, etype: type, value: BaseException, tb: Any, tb_offset: int | None = None) -> None:
    last = tb
    while last is not None and last.tb_next is not None:
        last = last.tb_next
    frame = last.tb_frame if last is not None else None
    found = None
    if frame is not None and frame.f_code.co_name == "<module>":
        found = _check_call_names("".join(linecache.getlines(frame.f_code.co_filename)))
    missing = getattr(value, "name", None)
    if found is None or missing not in found[1]:
        shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
        return
    line = f"✗ Exercise {found[0]}: answer the exercise above first ({missing} is not defined yet)"
    shell._showtraceback(etype, value, [f"\x1b[31m{line}\x1b[0m"])


def install() -> bool:
    """Register the handler in the running IPython shell; False where there is none, a handler is
    already set, or this is a graded run."""
    if os.environ.get("COURSE_KIT_GRADE") or "IPython" not in sys.modules:
        return False
    from IPython import get_ipython
    shell = get_ipython()
    if shell is None or shell.custom_exceptions:
        return False
    shell.set_custom_exc((NameError,), _answer_first)
    return True
