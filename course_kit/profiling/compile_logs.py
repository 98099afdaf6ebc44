"""`TORCH_LOGS="graph_breaks,recompiles"` inside a notebook: torch.compile's own account of where it
broke a graph and why it recompiled, captured in-process as lines of text (notebook 03).

`torch._logging.set_logs(graph_breaks=True, recompiles=True)` is what the environment variable does;
torch then writes those records, and its warnings about graph breaks, to stderr through handlers on
its loggers ("torch", "torch._dynamo", ...), which a notebook shows as a pink block that looks like an
error. `captured()` swaps those handlers for one that keeps the messages, and restores everything
after, so the lesson can show them as what they are: the compiler's log.
"""
from __future__ import annotations

import contextlib
import logging
from typing import Iterator

import torch


class _Keep(logging.Handler):
    def __init__(self, lines: list[str]) -> None:
        super().__init__(logging.DEBUG)
        self.lines = lines

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
        except Exception:  # noqa: BLE001 - a record that cannot format is skipped, never raised
            return
        kind = record.name.rsplit("__", 1)[-1] if "__" in record.name else record.levelname.lower()
        self.lines.extend(f"[{kind}] {line}".rstrip() for line in text.splitlines())


def _torch_loggers() -> list[logging.Logger]:
    names = [n for n in logging.root.manager.loggerDict if n == "torch" or n.startswith("torch.")]
    loggers = [logging.getLogger(n) for n in names]
    return [lg for lg in loggers if lg.handlers]


@contextlib.contextmanager
def captured(graph_breaks: bool = True, recompiles: bool = True) -> Iterator[list[str]]:
    """Inside the block, torch.compile's graph-break and recompile logs (and its warnings) go into
    the yielded list instead of stderr; outside it, logging is as it was."""
    lines: list[str] = []
    keep = _Keep(lines)
    torch._logging.set_logs(graph_breaks=graph_breaks, recompiles=recompiles)
    saved = [(lg, list(lg.handlers)) for lg in _torch_loggers()]
    for lg, handlers in saved:
        for h in handlers:
            lg.removeHandler(h)
        lg.addHandler(keep)
    try:
        yield lines
    finally:
        for lg, handlers in saved:
            lg.removeHandler(keep)
            for h in handlers:
                lg.addHandler(h)
        torch._logging.set_logs()      # back to the defaults (TORCH_LOGS, if set, still applies)


_ESSENTIAL = ("Graph break in user code", "Graph Break Reason", "Unsupported", "Explanation:", "Hint:",
              "Recompiling function", "triggered by", "- ", "Graph break from")


def essentials(lines: list[str]) -> list[str]:
    """The lines a reader needs: where each graph break happened and why, which guard made each
    recompile; the debug context, stack attributions and blank lines left out."""
    return [line for line in lines if line.split("] ", 1)[-1].strip().startswith(_ESSENTIAL)]


def as_block(lines: list[str], limit: int = 60) -> str:
    """The captured lines as one text block for a notebook (the first `limit` lines)."""
    shown = lines[:limit]
    more = len(lines) - len(shown)
    return "\n".join(shown + ([f"... {more} more lines"] if more > 0 else []))
