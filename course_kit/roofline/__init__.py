"""Notebook 00 (start here): the two ceilings every later notebook is placed against.

    ceilings    measured copy bandwidth and matmul FLOP/s on the machine at hand (section "Your
                machine's roofline"), an operation's cost and place under them (the explorer
                widget), and the sentences that explain both

Where the rest of 00 lives: the environment check is `device`, honest timing is `bench`, the
widget is `widgets/roofline.py`, the figure `plots/roofline.py`, the record `course-kit bench
roofline` (`benchmarks/roofline.py`), the checks `grading/checks/nb00.py`.
"""
from __future__ import annotations

import importlib


def __getattr__(name: str):
    # `from course_kit import roofline; roofline.op_cost(...)` in a notebook saved before the
    # lessons moved into packages: the old module's names, read from `ceilings`.
    # (import_module, not `from . import`: that would ask this hook for the submodule again)
    try:
        return getattr(importlib.import_module(f"{__name__}.ceilings"), name)
    except AttributeError:
        raise AttributeError(f"module 'course_kit.roofline' has no attribute {name!r}") from None
