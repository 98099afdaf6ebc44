"""What the GPU's idle time *inside* a step is made of, read from a profiler trace (notebook 07).
It lives beside `intervals` and `trace`: the one place GPU idle is computed (DESIGN.md).

The profiler's split (`profiling.intervals.split_idle`) calls every idle moment between a step's
first and last GPU activity "inside the step". That is not all launch latency between kernels: in
the engine's traces one gap per step stands out, before the step's CUDA graph replays, while the
host is still inside the step (in the kept H200 traces, inside its `cudaGraphLaunch` call). So the
inside-step idle is split here in two:

- `split_step_gaps(busy, spans)`: per step, its largest gap against the sum of the others (pure
  arithmetic over intervals, no trace format);
- `host_call_covering(gaps, calls)`: the host call that covers most of those largest gaps, from the
  trace's CUDA runtime/driver calls;
- `from_trace(trace)`: both, from a `torch.profiler` trace;
- `explain_step_gaps(figures, label)`: the sentence, whose wording follows the numbers.
"""
from __future__ import annotations

from statistics import median
from typing import Iterable, Mapping, Sequence

from . import intervals as iv
from . import trace as tr

Interval = tuple[float, float]


def _gaps_by_step(busy: list[Interval], spans: Iterable[Interval], threshold_us: float) -> list[list[Interval]]:
    """For each step span (empty spans skipped), its idle gaps of at least `threshold_us`, longest first."""
    return [sorted((g for g in iv.gaps(busy, (lo, hi)) if g[1] - g[0] >= threshold_us),
                   key=lambda g: g[0] - g[1])
            for lo, hi in spans if hi > lo]


def split_step_gaps(busy: Iterable[Interval], spans: Iterable[Interval], threshold_us: float = 1.0) -> dict:
    """Idle gaps of at least `threshold_us` inside each step's span (`busy`: every kernel and copy
    interval, µs), split into each step's largest gap and the rest. Sums over all steps, so that a
    step with little idle weighs little; `largest_share` is the largest gaps' part of all of it."""
    if threshold_us < 0:
        raise ValueError(f"threshold_us={threshold_us!r} must be >= 0")
    by_step = _gaps_by_step(iv.union(busy), spans, threshold_us)
    largest = [g[0][1] - g[0][0] for g in by_step if g]
    rest = [b - a for g in by_step for a, b in g[1:]]
    inside, steps = sum(largest) + sum(rest), len(by_step)
    return {"steps": steps, "threshold_us": threshold_us, "inside_us": inside,
            "largest_us": sum(largest), "rest_us": sum(rest), "rest_gaps": len(rest),
            "largest_share": sum(largest) / inside if inside > 0 else None,
            "largest_median_us": median(largest) if largest else None,
            "rest_median_us": median(rest) if rest else None,
            "inside_per_step_us": inside / steps if steps else None}


def largest_gaps(busy: Iterable[Interval], spans: Iterable[Interval], threshold_us: float = 1.0) -> list[Interval]:
    """Each step's largest idle gap (of at least `threshold_us`), as an interval."""
    return [g[0] for g in _gaps_by_step(iv.union(busy), spans, threshold_us) if g]


def host_call_covering(gaps: Sequence[Interval], calls: Iterable[tuple[str, float, float]]) -> dict | None:
    """The host call name (`calls`: (name, start, end)) whose calls overlap the most of `gaps`, and
    the share of the gaps' time they cover. None when no call overlaps any gap."""
    total = sum(b - a for a, b in gaps)
    by_name: dict[str, list[Interval]] = {}
    for name, a, b in calls:
        by_name.setdefault(name, []).append((a, b))
    best, covered = None, 0.0
    for name, ivs in by_name.items():
        c = iv.length(iv.intersect(list(gaps), ivs))
        if c > covered:
            best, covered = name, c
    if best is None or total <= 0:
        return None
    return {"name": best, "covered_us": covered, "share": covered / total}


def from_trace(trace: Mapping | list) -> dict:
    """`split_step_gaps` of a profiler trace (kernels and copies, or a CPU run's operators), with
    the host call that covers the largest gaps (`host_call`, None in a trace without CUDA calls)."""
    evs = tr.events(trace)
    device, acts = tr.activities(evs)
    spans = list(tr.step_spans(acts).values())
    busy = [(a.start_us, a.end_us) for a in acts]
    threshold = tr.GAP_US[device]
    figures = split_step_gaps(busy, spans, threshold)
    calls = [(e.get("name", "?"), float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0)))
             for e in evs if e.get("cat") in tr.LAUNCH]
    figures.update(device=device, host_call=host_call_covering(largest_gaps(busy, spans, threshold), calls))
    return figures


def explain_step_gaps(f: Mapping, label: str) -> str:
    """One paragraph: how much of the idle inside the steps is each step's one largest gap (and
    which host call the GPU was waiting on then) against the many short gaps between kernels."""
    if not f.get("inside_us"):
        return f"{label}: no idle gap of at least {f.get('threshold_us', 1.0):g} µs inside its steps."
    text = (f"{label}: inside its steps the {'GPU' if f.get('device', 'cuda') == 'cuda' else 'worker'} was idle "
            f"{f['inside_per_step_us']:,.0f} µs per step; one gap per step, each step's largest (median "
            f"{f['largest_median_us']:,.0f} µs), makes up {f['largest_share']:.0%} of it.")
    call = f.get("host_call")
    if call and call["share"] >= 0.5:
        text += (f" During {call['share']:.0%} of those largest gaps the host was inside `{call['name']}`: the GPU "
                 f"waited for host work inside the step, not for the next kernel of a running graph.")
    elif f.get("device", "cuda") == "cuda":
        text += " No single host call covers most of those largest gaps."
    if f["rest_gaps"]:
        text += (f" The other {f['rest_gaps'] / f['steps']:.0f} gaps per step (median {f['rest_median_us']:,.1f} µs, "
                 f"{f['rest_us'] / f['steps']:,.0f} µs per step together) are the time between "
                 f"{'kernels' if f.get('device', 'cuda') == 'cuda' else 'operators'} that fusion removes.")
    return text
