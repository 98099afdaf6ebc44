"""A shared helper for issue 42 item 5: how long each cell of a notebook takes at the learner's CPU
size. It executes the learner's build (exercise stubs raise, as for a learner: errors allowed) in a
scratch folder, with `COURSE_KIT_SMOKE` unset so that `device.defaults()` picks the CPU size, and
reads nbclient's per-cell timestamps.

    from cell_timing import cell_times, slowest
    times = cell_times("02")            # [(cell index, seconds, first line of the source), ...]
    slowest(times, 3)

Any notebook owner can call it; `tests/test_cell_times.py` applies it to notebooks 02, 03, 05, 07
and 10 (opt-in: COURSE_KIT_CELL_TIMES=1, since a CPU-size run of a notebook takes minutes).
"""
from __future__ import annotations

import os
import shutil
import tempfile
from datetime import datetime
from pathlib import Path

BUDGET_S = 30.0       # DESIGN.md / CONTRIBUTING.md: every cell at the learner's CPU size, idle 2-core machine


def _seconds(meta: dict) -> float | None:
    ex = meta.get("execution") or {}
    a, b = ex.get("iopub.status.busy"), ex.get("shell.execute_reply")
    if not a or not b:
        return None
    parse = lambda s: datetime.fromisoformat(s.replace("Z", "+00:00"))   # noqa: E731
    return (parse(b) - parse(a)).total_seconds()


def cell_times(number: str, smoke: bool = False, timeout: int = 1800) -> list[tuple[int, float, str]]:
    """Execute notebooks/NN_*.ipynb at CPU size (or smoke size) and time every code cell."""
    import nbformat
    from nbclient import NotebookClient

    from course_kit import nbbuild
    [src] = sorted(Path(nbbuild.NOTEBOOKS).glob(f"{number}_*.ipynb"))
    work = Path(tempfile.mkdtemp(prefix="cell_times_"))
    try:
        shutil.copy(src, work / src.name)
        nb = nbformat.read(work / src.name, as_version=4)
        env_before = os.environ.get("COURSE_KIT_SMOKE")
        os.environ.pop("COURSE_KIT_SMOKE", None)
        if smoke:
            os.environ["COURSE_KIT_SMOKE"] = "1"
        try:
            NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=True, record_timing=True,
                           resources={"metadata": {"path": str(work)}}).execute()
        finally:
            if env_before is None:
                os.environ.pop("COURSE_KIT_SMOKE", None)
            else:
                os.environ["COURSE_KIT_SMOKE"] = env_before
        out = []
        for i, cell in enumerate(nb.cells):
            if cell.cell_type == "code":
                s = _seconds(cell.metadata)
                if s is not None:
                    out.append((i, s, (cell.source.splitlines() or [""])[0][:80]))
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)


def slowest(times: list[tuple[int, float, str]], n: int = 1) -> list[tuple[int, float, str]]:
    return sorted(times, key=lambda t: -t[1])[:n]
