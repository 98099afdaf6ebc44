"""Where the course's data lives: the one rule for records (data/reference), request traces
(data/traces) and the trained models (data/models). Imports nothing heavy, so the load client stays
free of torch.

$COURSE_KIT_DATA when set (a GPU campaign's own copy), else the checkout's data/, else the data the
course wheel carries (`colab.add_data`: course_kit/_data), else ./data.
"""
from __future__ import annotations

import os
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent


def data_root() -> Path:
    env = os.environ.get("COURSE_KIT_DATA")
    if env:
        return Path(env)
    for candidate in (PACKAGE.parent / "data", PACKAGE / "_data"):
        if candidate.is_dir():
            return candidate
    return Path.cwd() / "data"


def data_dir(kind: str) -> Path:
    """data_root() / kind, for kind one of "reference", "traces", "models"."""
    if kind not in ("reference", "traces", "models"):
        raise ValueError(f"kind={kind!r}; choose one of 'reference', 'traces', 'models'")
    return data_root() / kind
