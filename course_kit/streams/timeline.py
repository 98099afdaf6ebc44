"""Timelines: what ran where and when, and the idle-time arithmetic built on them.

A timeline is a list of spans `(lane, name, start_s, end_s)`. A lane is one queue of work: the host
thread ("cpu"), a CUDA stream ("compute", "copy"), or a worker thread standing in for the GPU.
The two figures that matter for overlap are derived here:

- the idle fraction of a lane: the share of the window in which nothing ran on it;
- the bound on the speed-up from overlap: with perfect overlap a loop can run no faster than its
  busiest lane, so speed-up <= window / max(busy time of each lane). For a GPU-bound loop this is
  1 / (1 - GPU idle fraction).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Iterable, Sequence
from ..profiling import intervals as iv


@dataclass(frozen=True)
class Span:
    """One piece of work on one lane, times in seconds from the timeline's origin."""

    lane: str
    name: str
    start_s: float
    end_s: float

    def __post_init__(self) -> None:
        if self.end_s < self.start_s:
            raise ValueError(f"span {self.name!r} on {self.lane!r} ends ({self.end_s}) before it "
                             f"starts ({self.start_s}); end_s must be >= start_s")

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


class Timeline:
    """An ordered collection of spans with per-lane busy/idle queries."""

    def __init__(self, spans: Sequence[Span] | None = None) -> None:
        self.spans: list[Span] = list(spans or [])

    def add(self, lane: str, name: str, start_s: float, end_s: float) -> Span:
        span = Span(lane, name, float(start_s), float(end_s))
        self.spans.append(span)
        return span

    # --- queries --------------------------------------------------------------------------
    @property
    def lanes(self) -> list[str]:
        seen: dict[str, None] = {}
        for s in self.spans:
            seen.setdefault(s.lane, None)
        return list(seen)

    def on(self, lane: str) -> list[Span]:
        if lane not in self.lanes:
            raise ValueError(f"lane {lane!r} not in this timeline; lanes: {self.lanes}")
        return sorted((s for s in self.spans if s.lane == lane), key=lambda s: s.start_s)

    def window(self, lanes: Sequence[str] | None = None) -> tuple[float, float]:
        """(first start, last end) over the given lanes (all lanes by default)."""
        spans = [s for s in self.spans if lanes is None or s.lane in lanes]
        if not spans:
            raise ValueError(f"no spans on lanes {lanes}; lanes: {self.lanes}")
        return min(s.start_s for s in spans), max(s.end_s for s in spans)

    def busy_s(self, lane: str, window: tuple[float, float] | None = None) -> float:
        """Time in which at least one span ran on `lane`, clipped to `window` (profiling.intervals:
        the same union arithmetic as the profiler's GPU-idle figure)."""
        spans = [(sp.start_s, sp.end_s) for sp in self.on(lane)]
        return iv.length(spans if window is None else iv.clip(spans, window))

    def gaps(self, lane: str, window: tuple[float, float] | None = None) -> list[tuple[float, float]]:
        """Idle intervals of `lane` inside `window` (the lane's own first-to-last span by default)."""
        busy = iv.union((sp.start_s, sp.end_s) for sp in self.on(lane))
        lo, hi = window if window is not None else (busy[0][0], busy[-1][1])
        return [(a, b) for a, b in iv.gaps(busy, (lo, hi)) if b > a] if hi > lo else []

    def idle_fraction(self, lane: str, window: tuple[float, float] | None = None) -> float:
        """Share of `window` (default: the whole timeline) in which `lane` ran nothing."""
        lo, hi = window if window is not None else self.window()
        if hi <= lo:
            raise ValueError(f"empty window ({lo}, {hi}); it needs end > start")
        return 1.0 - self.busy_s(lane, (lo, hi)) / (hi - lo)

    def overlap_speedup_bound(self, lanes: Sequence[str] | None = None) -> float:
        """Best speed-up overlap could give: window / busiest lane's busy time."""
        lanes = list(lanes or self.lanes)
        lo, hi = self.window()
        busiest = max(self.busy_s(lane, (lo, hi)) for lane in lanes)
        return (hi - lo) / busiest if busiest > 0 else float("inf")

    # --- (de)serialisation for reference records -----------------------------------------
    def shifted(self, origin_s: float | None = None) -> "Timeline":
        """A copy with times relative to `origin_s` (default: the first start)."""
        origin = self.window()[0] if origin_s is None else origin_s
        return Timeline([Span(s.lane, s.name, s.start_s - origin, s.end_s - origin)
                         for s in self.spans])

    def to_records(self, max_spans: int | None = None) -> list[dict]:
        spans = sorted(self.spans, key=lambda s: s.start_s)
        if max_spans is not None:
            spans = spans[:max_spans]
        return [asdict(s) for s in spans]

    @classmethod
    def from_records(cls, records: Iterable[dict]) -> "Timeline":
        return cls([Span(r["lane"], r["name"], float(r["start_s"]), float(r["end_s"]))
                    for r in records])

    def __len__(self) -> int:
        return len(self.spans)

    def __repr__(self) -> str:
        return f"Timeline({len(self.spans)} spans on {self.lanes})"


def idle_fraction(spans: Sequence[Span] | Timeline, lane: str) -> float:
    """The share of the whole window in which `lane` ran none of its spans: 1 - busy(lane) / window.
    On an event timeline of whole steps this is the host's picture, never GPU idle (profiling.py)."""
    tl = spans if isinstance(spans, Timeline) else Timeline(spans)
    return tl.idle_fraction(lane)


def speedup_bound_from_idle(idle: float) -> float:
    """Upper bound on the speed-up from removing all idle time of a lane idle `idle` of the time."""
    if not 0.0 <= idle < 1.0:
        raise ValueError(f"idle fraction {idle} is outside [0, 1)")
    return 1.0 / (1.0 - idle)
