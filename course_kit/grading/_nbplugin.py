"""pytest plugin loaded into the grader's nbval run: one JSON line per executed notebook cell.

It writes to the file named by COURSE_KIT_GRADE_RESULTS as each cell finishes, so a run killed by
the total timeout still leaves the outcomes of the cells it got through. The grader's pytest process
is not the student's kernel (which runs as another user when grading as root), so the student
cannot write this file.
"""
from __future__ import annotations

import json
import os
import re

import pytest

from .fresh import TOKEN_PREFIX

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_TOKEN = re.compile(re.escape(TOKEN_PREFIX) + r" ([0-9a-f]+)")


def _write(record: dict) -> None:
    path = os.environ.get("COURSE_KIT_GRADE_RESULTS")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(record) + "\n")


def _outputs_text(item) -> str:
    text = []
    for out in getattr(item, "test_outputs", None) or []:
        if out.get("output_type") == "stream":
            text.append(out.get("text", ""))
    return "".join(text)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    yield
    cell = getattr(item, "cell_num", None)
    if cell is None or call.when not in ("setup", "call"):
        return
    if call.when == "setup" and call.excinfo is None:
        return
    record: dict = {"cell": cell, "when": call.when,
                    "tokens": _TOKEN.findall(_outputs_text(item))}
    if call.excinfo is None:
        record["outcome"] = "ok"
    else:
        message = _ANSI.sub("", str(call.excinfo.value))
        record["outcome"] = "timeout" if message.startswith("Timeout of") else "error"
        record["ename"], record["evalue"] = type(call.excinfo.value).__name__, message[:2000]
        for out in getattr(item, "test_outputs", None) or []:
            if out.get("output_type") == "error":
                record["ename"] = out.get("ename", "")
                record["evalue"] = _ANSI.sub("", str(out.get("evalue", "")))[:2000]
    _write(record)
