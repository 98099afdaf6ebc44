"""Notebook 04 (graph capture): what each capture method records, and what it misses.

    methods     torch.jit.trace, torch.jit.script, torch.fx and torch.export on the same modules:
                `capture`, `compare` (the comparison table), `save_load` and the IR shown
                (sections 1-4)
    traps       each trap run for real: trace baking a branch, script refusing Python, export
                refusing data-dependent control flow and `torch.cond` accepting it (section 5)
    gallery     the capture gallery widget's cells: one trap x one method, captured and run
    aoti        AOTInductor: the decode step exported, compiled to a .pt2 package, loaded in a fresh
                process (cold start against torch.compile's first call), a trap it refuses (section 6)
    aoti_cuda   what a CUDA package's C++ build needs (CUDA headers, libcuda) on a pip-only machine
    aoti_cold   the fresh process of one cold start (run as a script by `aoti.cold_start`)

Widget `widgets/capture.py`, figure `plots/capture.py`, checks `grading/checks/nb04.py`.
"""
from __future__ import annotations

import importlib


def __getattr__(name: str):
    # `from course_kit import capture; capture.compare()` in a notebook saved before the lessons
    # moved into packages: the old module's names, read from `methods`.
    # (import_module, not `from . import`: that would ask this hook for the submodule again)
    try:
        return getattr(importlib.import_module(f"{__name__}.methods"), name)
    except AttributeError:
        raise AttributeError(f"module 'course_kit.capture' has no attribute {name!r}") from None
