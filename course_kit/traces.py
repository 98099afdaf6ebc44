"""Where request traces live (data/traces/*.jsonl) and how a name finds one: the one rule that the
engine's replay (engine.trace, notebook 06) and the load generator (loadgen, `bench serving`) share.
It imports nothing heavy, so the load client stays free of torch."""
from __future__ import annotations

from pathlib import Path

from .paths import data_dir

TRACES_DIR = data_dir("traces")


def trace_path(name: str | Path) -> Path:
    """A trace file: `name` itself if it exists, else data/traces/<name>.jsonl (or <name> with its
    suffix); a ValueError names the known traces otherwise."""
    path = Path(name)
    if not path.exists():
        path = TRACES_DIR / (path.name if path.suffix else f"{path.name}.jsonl")
    if not path.exists():
        known = sorted(p.stem for p in TRACES_DIR.glob("*.jsonl"))
        raise ValueError(f"no trace {str(name)!r}; known traces: {known}")
    return path
