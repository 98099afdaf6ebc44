"""The one GPU-idle arithmetic of the course: intervals in, fractions out (no torch, no profiler).

GPU idle over a window is 1 - (union of the kernel and copy execution intervals) / (window length),
read from a profiler trace (DESIGN.md, "Performance method"). Overlapping work (two streams, a
kernel beside a copy) counts once; nested intervals count once; work outside the window is clipped.

What is left idle splits in two, given the GPU-side span of each step (first activity start to last
activity end of the work a step launched):
- **within steps**: idle inside the steps' spans, the gaps between one step's kernels (launch
  latency, even inside a CUDA graph): fusion and megakernels remove it;
- **between steps**: idle outside every step's span, the GPU waiting for the host to prepare and
  launch the next step: overlapping host and device work (an async loop) removes it.
The two add up to the idle fraction.
"""
from __future__ import annotations

from typing import Iterable, Sequence

Interval = tuple[float, float]


def union(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, disjoint intervals covering the same time (touching intervals merge)."""
    out: list[list[float]] = []
    for a, b in sorted((float(a), float(b)) for a, b in intervals):
        if b < a:
            raise ValueError(f"interval ({a}, {b}) ends before it starts; it needs end >= start")
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def clip(intervals: Iterable[Interval], window: Interval) -> list[Interval]:
    """The union of `intervals`, cut to `window`; empty pieces dropped."""
    lo, hi = window
    return [(max(a, lo), min(b, hi)) for a, b in union(intervals) if min(b, hi) > max(a, lo)]


def length(intervals: Iterable[Interval]) -> float:
    """Total time covered (overlaps once)."""
    return sum(b - a for a, b in union(intervals))


def intersect(xs: Sequence[Interval], ys: Sequence[Interval]) -> list[Interval]:
    """Time covered by both sets of intervals."""
    xs, ys = union(xs), union(ys)
    out, i, j = [], 0, 0
    while i < len(xs) and j < len(ys):
        a, b = max(xs[i][0], ys[j][0]), min(xs[i][1], ys[j][1])
        if b > a:
            out.append((a, b))
        if xs[i][1] < ys[j][1]:
            i += 1
        else:
            j += 1
    return out


def _check_window(window: Interval) -> tuple[float, float]:
    lo, hi = float(window[0]), float(window[1])
    if not hi > lo:
        raise ValueError(f"window ({lo}, {hi}) is empty; it needs end > start")
    return lo, hi


def idle_fraction(busy: Iterable[Interval], window: Interval) -> float:
    """1 - (union of `busy` inside `window`) / window length. No activity at all: 1.0."""
    lo, hi = _check_window(window)
    return 1.0 - length(clip(busy, (lo, hi))) / (hi - lo)


def gaps(busy: Iterable[Interval], window: Interval) -> list[Interval]:
    """The idle intervals of `window`: where no busy interval runs."""
    lo, hi = _check_window(window)
    out, t = [], lo
    for a, b in clip(busy, (lo, hi)):
        if a > t:
            out.append((t, a))
        t = max(t, b)
    if t < hi:
        out.append((t, hi))
    return out


def split_idle(busy: Iterable[Interval], steps: Iterable[Interval], window: Interval) -> dict:
    """Idle of `window`, split into the part inside the steps' spans (between kernels of a step) and
    the part outside them (between steps). Fractions of the window; they add up to `idle`."""
    lo, hi = _check_window(window)
    span = hi - lo
    busy_in = clip(busy, (lo, hi))
    step_spans = clip(steps, (lo, hi))
    inside = length(step_spans)
    busy_inside = length(intersect(busy_in, step_spans))
    idle = 1.0 - length(busy_in) / span
    within = (inside - busy_inside) / span
    return {"idle": idle, "within_steps": within, "between_steps": idle - within,
            "steps_cover": inside / span}
