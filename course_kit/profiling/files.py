"""The traces kept next to the records: `data/reference/<slug>/traces/<name>.trace.json.gz`.

A whole run's trace is tens of megabytes; a learner needs a few steps of it. `keep_window` keeps the
events of `steps` consecutive steps from the middle of the run (and the process/thread names), `save` writes it gzipped and
shrinks it until it is under `max_bytes` (first dropping the host's operator events, then steps),
so every kept trace opens quickly in https://ui.perfetto.dev (drag the file in) or chrome://tracing.
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Mapping

from .. import reference
from . import trace as tr

MAX_BYTES = 2_000_000
SUFFIX = ".trace.json.gz"
HOW_TO_OPEN = ("open it in https://ui.perfetto.dev (Open trace file, or drag it in; .gz is fine) or in "
               "Chrome at chrome://tracing (Load)")


def folder(slug: str | None = None) -> Path:
    """Where a machine's traces live: data/reference/<slug>/traces."""
    return reference.root() / (slug or reference.gpu_slug()) / "traces"


def keep_window(trace: Mapping, steps: int | None = 3, drop_cats: tuple[str, ...] = ()) -> dict:
    """A copy of `trace` holding only `steps` consecutive profiled steps from the middle of the run
    (None: all), the metadata events and nothing of the categories in `drop_cats`."""
    evs = trace.get("traceEvents", [])
    xs = tr.events(evs)
    ranges, window = tr.annotations(xs)
    lo, hi = (window or (float("-inf"), float("inf")))
    if steps is not None and ranges:
        ks = tr.middle(sorted({r[0] for r in ranges}), steps)
        kept = sorted((r for r in ranges if r[0] in ks), key=lambda r: r[1])
        lo, hi = kept[0][1], max(r[2] for r in kept)
        # the GPU work of the kept steps ends after their host ranges
        acts = [a for a in tr.gpu_activities(xs) if a.step in {r[0] for r in kept}]
        hi = max([hi] + [a.end_us for a in acts])
    out = []
    for e in evs:
        if e.get("cat") in drop_cats:
            continue
        if e.get("ph") == "M":
            out.append(e)
            continue
        if "ts" not in e:
            continue
        a = float(e["ts"])
        b = a + float(e.get("dur", 0.0))
        if b >= lo and a <= hi or e.get("name") == tr.WINDOW:
            out.append(e)
    return {**{k: v for k, v in trace.items() if k != "traceEvents"}, "traceEvents": out}


def _gz(trace: Mapping) -> bytes:
    return gzip.compress(json.dumps(trace, separators=(",", ":")).encode(), compresslevel=9, mtime=0)


def save(trace: Mapping, name: str, slug: str | None = None, steps: int = 3, max_bytes: int = MAX_BYTES,
         where: Path | str | None = None) -> Path:
    """Write `steps` steps from the middle of `trace` to <folder>/<name>.trace.json.gz, under `max_bytes`."""
    if not name or "/" in name or name.startswith("."):
        raise ValueError(f"trace name {name!r} must be a plain file name")
    target = Path(where or folder(slug)) / f"{name}{SUFFIX}"
    attempts = [(steps, ()), (steps, ("cpu_op", "python_function", "cpu_instant_event"))]
    attempts += [(n, attempts[-1][1]) for n in (2, 1) if n < steps]
    for n, drop in attempts:
        data = _gz(keep_window(trace, n, drop))
        if len(data) <= max_bytes:
            break
    else:
        raise ValueError(f"trace {name!r} is {len(data):,} bytes even with one step and no host operators; "
                         f"the limit is {max_bytes:,}")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    return target


def load(name: str, slug: str = reference.REFERENCE_GPU, where: Path | str | None = None) -> dict | None:
    """A kept trace as a dict, or None when it was not recorded."""
    path = Path(where or folder(slug)) / f"{name}{SUFFIX}"
    if not path.is_file():
        return None
    return json.loads(gzip.decompress(path.read_bytes()))
