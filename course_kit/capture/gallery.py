"""Notebook 04's capture gallery: one trap x one capture method, captured and run for real.

Four traps, each a small module with one kind of Python a graph cannot hold:

- data-dependent branch (`Gate`): captured on a positive-sum input, run on a negative one;
- Python side effect (`LogCalls`): appends to a Python list on every call; the graph has no list;
- in-place on an input (`InPlace`): doubles the caller's tensor before using it;
- a global (`ScaleByGlobal`): multiplies by a module-level number that changes after capture.

`gallery_cell(trap, method)` captures the trap's module with the method (`capture.capture`), runs the
capture and eager on a probe input, and returns what was captured (the IR excerpt), whether the
outputs, the input mutation and the side effect still match eager, and the verdict. Cells are cached:
a learner flipping between cells waits for a capture only the first time.
"""
from __future__ import annotations

import contextlib
import io
import logging
from functools import lru_cache

import torch
from torch import nn
from torch.export import Dim

from .methods import METHODS, Gate, InPlace, capture, first_line, ir_text, same

CALL_LOG: list[int] = []        # LogCalls's side effect: one entry per call
SCALE = 2.0                      # ScaleByGlobal's global, changed to 3.0 after capture


class LogCalls(nn.Module):
    """A Python side effect: every call appends the batch size to a list."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        CALL_LOG.append(x.shape[0])
        return x * 2


class ScaleByGlobal(nn.Module):
    """Reads a module-level global at every call (a config value, a flag, a schedule)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * SCALE


def _g(seed: int, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


TRAPS = {
    "data-dependent branch": (Gate, lambda: _g(0, 4, 8).abs(), lambda: -_g(1, 4, 8).abs(),
                              "captured with a positive-sum input, run on a negative-sum one"),
    "Python side effect": (LogCalls, lambda: _g(0, 4, 8), lambda: _g(1, 4, 8),
                           "eager appends to CALL_LOG on every call"),
    "in-place on an input": (InPlace, lambda: _g(0, 4, 8), lambda: _g(1, 4, 8),
                             "the caller's tensor is doubled in place; output and mutation compared"),
    "a global": (ScaleByGlobal, lambda: _g(0, 4, 8), lambda: _g(1, 4, 8),
                 "captured with SCALE = 2.0, run after setting SCALE = 3.0"),
}


@contextlib.contextmanager
def _quiet_torch_logs():
    """export's refusal also logs the partial graph at WARNING; the gallery shows the error instead."""
    log = logging.getLogger("torch")
    old = log.level
    log.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stderr(io.StringIO()):     # and the graph dump it writes to stderr
            yield
    finally:
        log.setLevel(old)


@lru_cache(maxsize=None)
def gallery_cell(trap: str, method: str, ir_lines: int = 14) -> dict:
    """Capture `trap` with `method`, run both on the probe; the verdict and what was captured."""
    global SCALE
    if trap not in TRAPS:
        raise ValueError(f"unknown trap {trap!r}; choose one of {list(TRAPS)}")
    if method not in METHODS:
        raise ValueError(f"unknown capture method {method!r}; choose one of {METHODS}")
    make, example, probe, note = TRAPS[trap]
    module = make().eval()
    SCALE = 2.0
    out = {"trap": trap, "method": method, "note": note}
    try:
        with _quiet_torch_logs():
            cap = capture(method, module, (example(),), ({0: Dim("batch")},) if method == "export" else None)
    except Exception as err:  # noqa: BLE001 - a refusal is the finding
        return {**out, "status": "refused", "detail": first_line(err, 240), "ir": ""}
    out["ir"] = ir_text(cap, lines=ir_lines)
    out["warnings"] = [w.split(":")[0] for w in cap.warnings if "Deprecat" not in w.split(":")[0]]
    try:
        if trap == "a global":
            SCALE = 3.0
        x = probe()
        x_eager, x_cap = x.clone(), x.clone()
        n0 = len(CALL_LOG)
        expected = module(x_eager)
        eager_calls = len(CALL_LOG) - n0
        try:
            got = cap.fn(x_cap)
        except Exception as err:  # noqa: BLE001 - fails at run: the finding
            return {**out, "status": "fails at run", "detail": first_line(err, 240)}
        cap_calls = len(CALL_LOG) - n0 - eager_calls
    finally:
        SCALE = 2.0
    ok_out, diff = same(expected, got)
    ok_in, diff_in = same(x_eager, x_cap)
    ok_side = cap_calls == eager_calls
    problems = ([] if ok_out else [f"output differs from eager (max |Δ| {diff:.3g})"]) + \
               ([] if ok_in else [f"the input's in-place change differs (max |Δ| {diff_in:.3g})"]) + \
               ([] if ok_side else [f"the side effect ran {cap_calls} time(s) in one call (eager: {eager_calls})"])
    warned = f" A warning was raised at capture: {out['warnings'][0]}." if out["warnings"] else ""
    if problems:
        return {**out, "status": "silently wrong",
                "detail": _upper_first("; ".join(problems)) + ", with no error." + warned}
    return {**out, "status": "correct",
            "detail": "Output, input mutation and side effects all match eager on the probe." + warned}


def _upper_first(text: str) -> str:
    return text[:1].upper() + text[1:]


def gallery(traps=tuple(TRAPS), methods=METHODS) -> list[dict]:
    """Every (trap, method) cell: the whole grid (about 2-6 s on 2 CPU cores, then cached)."""
    return [gallery_cell(t, m) for t in traps for m in methods]
