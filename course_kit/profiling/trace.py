"""Reading a torch.profiler trace (its Chrome/Perfetto JSON) into what a lesson needs.

A trace exported by `torch.profiler` (`export_chrome_trace`) is a list of events with a category:
- GPU work: "kernel", "gpu_memcpy", "gpu_memset" (from CUPTI: when each ran on the GPU, on which
  stream, and the `correlation` id of the host call that launched it);
- host calls: "cuda_runtime" / "cuda_driver" (cudaLaunchKernel, cudaGraphLaunch, cuLaunchKernel ...,
  with the same `correlation` id), "cpu_op" (ATen operators), "user_annotation" (our
  `record_function` ranges: "step 3", the measured window);
- "gpu_user_annotation": a `record_function` range mirrored on the GPU (spans kernels: not work).

`summarize` turns one trace into the figures of DESIGN.md's performance method: the GPU idle fraction
(`intervals.idle_fraction` over kernel and copy intervals), its split into between and within steps
(kernels are attributed to the step whose range held the host call that launched them), kernels per
step, the launch gaps inside steps, and the top kernels by GPU time. On a CPU-only machine the trace
has no GPU work; the same arithmetic runs over the outermost ATen operators of each thread and is
labelled as such, never as GPU idle.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from statistics import median
from typing import Iterable, Mapping

from . import intervals as iv

GPU_IDLE_METHOD = "profiler kernel-interval union"        # every record's gpu_idle_fraction says this
CPU_OP_METHOD = "profiler CPU-operator union (no GPU: share of the window outside ATen operators)"
GPU_WORK = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH = ("cuda_runtime", "cuda_driver")
STEP = re.compile(r"^step (\d+)$")
WINDOW = "window"                # the record_function range around a whole measured run
GAP_US = {"cuda": 1.0, "cpu": 5.0}   # gaps shorter than this are not counted as launch gaps


@dataclass(frozen=True)
class Activity:
    """One piece of work: a kernel or copy on a GPU stream, or an operator on a CPU thread."""
    kind: str        # "kernel", "memcpy", "memset" or "cpu_op"
    name: str
    lane: str        # "stream 7" or "thread 1234"
    start_us: float
    end_us: float
    step: int | None = None

    @property
    def dur_us(self) -> float:
        return self.end_us - self.start_us


def events(trace: Mapping | list) -> list[dict]:
    """The complete ("X") events of a trace (a dict with "traceEvents", or the list itself)."""
    evs = trace.get("traceEvents", []) if isinstance(trace, Mapping) else trace
    return [e for e in evs if e.get("ph") == "X" and "ts" in e]


def _span(e: Mapping) -> tuple[float, float]:
    ts = float(e["ts"])
    return ts, ts + float(e.get("dur", 0.0))


def annotations(evs: Iterable[Mapping], tid: object = None) -> tuple[list[tuple[int, float, float]], tuple[float, float] | None]:
    """Host-side step ranges [(k, start, end)] named "step k" (of thread `tid` only, when given), and
    the "window" range (or None)."""
    steps, window = [], None
    for e in evs:
        if e.get("cat") != "user_annotation":
            continue
        m = STEP.match(e.get("name", ""))
        if m:
            if tid is None or e.get("tid") == tid:
                steps.append((int(m.group(1)), *_span(e)))
        elif e.get("name") == WINDOW:
            window = _span(e) if window is None else (min(window[0], _span(e)[0]), max(window[1], _span(e)[1]))
    return sorted(steps, key=lambda s: s[1]), window


def _step_at(ranges: list[tuple[int, float, float]], t: float) -> int | None:
    """The innermost step range holding host time t (the latest one that started before it)."""
    best = None
    for k, a, b in ranges:
        if a <= t <= b and (best is None or a >= best[1]):
            best = (k, a)
    return None if best is None else best[0]


def gpu_activities(evs: list[Mapping]) -> list[Activity]:
    """Kernels and copies, each attributed to the step whose host range launched it: through the
    launch call's correlation id, else through the GPU-side mirror of the step range."""
    steps, _ = annotations(evs)
    launched_at = {e["args"]["correlation"]: float(e["ts"]) for e in evs
                   if e.get("cat") in LAUNCH and "correlation" in e.get("args", {})}
    gpu_steps = [(int(m.group(1)), *_span(e)) for e in evs if e.get("cat") == "gpu_user_annotation"
                 for m in [STEP.match(e.get("name", ""))] if m]
    out = []
    for e in evs:
        if e.get("cat") not in GPU_WORK:
            continue
        a, b = _span(e)
        args = e.get("args", {})
        t = launched_at.get(args.get("correlation"))
        step = _step_at(steps, t) if t is not None else None
        if step is None and gpu_steps:
            step = _step_at(gpu_steps, (a + b) / 2)
        kind = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}[e["cat"]]
        out.append(Activity(kind, e.get("name", "?"), f"stream {args.get('stream', '?')}", a, b, step))
    return sorted(out, key=lambda x: x.start_us)


def cpu_activities(evs: list[Mapping]) -> list[Activity]:
    """The outermost ATen operators of each thread (nested ones are inside them), each attributed to
    the step range of its own thread that holds it (the engine's worker thread marks its steps too),
    else to any thread's."""
    steps, _ = annotations(evs)
    by_thread: dict[object, list[Mapping]] = {}
    for e in evs:
        if e.get("cat") == "cpu_op":
            by_thread.setdefault(e.get("tid", "?"), []).append(e)
    out = []
    for tid, ops in by_thread.items():
        lane = f"thread {tid}"
        steps = annotations(evs, tid)[0] or annotations(evs)[0]
        end = float("-inf")
        for e in sorted(ops, key=lambda e: (float(e["ts"]), -float(e.get("dur", 0.0)))):
            a, b = _span(e)
            if a < end:          # nested in (or overlapping) the previous outermost operator
                continue
            end = b
            out.append(Activity("cpu_op", e.get("name", "?"), lane, a, b, _step_at(steps, a)))
    return sorted(out, key=lambda x: x.start_us)


def activities(trace: Mapping | list) -> tuple[str, list[Activity]]:
    """("cuda", kernels and copies) when the trace holds GPU work, else ("cpu", outermost operators)."""
    evs = events(trace)
    gpu = gpu_activities(evs)
    return ("cuda", gpu) if gpu else ("cpu", cpu_activities(evs))


def step_spans(acts: list[Activity]) -> dict[int, tuple[float, float]]:
    """Each step's span on the device: its first activity's start to its last activity's end."""
    spans: dict[int, list[float]] = {}
    for a in acts:
        if a.step is None:
            continue
        s = spans.setdefault(a.step, [a.start_us, a.end_us])
        s[0], s[1] = min(s[0], a.start_us), max(s[1], a.end_us)
    return {k: (v[0], v[1]) for k, v in sorted(spans.items())}


def launch_gaps(acts: list[Activity], spans: Mapping[int, tuple[float, float]], threshold_us: float) -> list[tuple[float, float]]:
    """Idle intervals of at least `threshold_us` inside a step's span: the gaps between its kernels."""
    busy = [(a.start_us, a.end_us) for a in acts]
    out = []
    for lo, hi in spans.values():
        if hi > lo:
            out += [g for g in iv.gaps(busy, (lo, hi)) if g[1] - g[0] >= threshold_us]
    return out


def top_kernels(acts: list[Activity], n_steps: int, top: int = 10) -> list[dict]:
    """The `top` activity names by total time: calls, total µs, µs per step, share of all work."""
    total = sum(a.dur_us for a in acts) or 1.0
    by: dict[str, list[float]] = {}
    for a in acts:
        row = by.setdefault(a.name, [0, 0.0])
        row[0] += 1
        row[1] += a.dur_us
    rows = sorted(by.items(), key=lambda kv: -kv[1][1])[:top]
    per = max(n_steps, 1)
    return [{"name": name, "calls": int(c), "total_us": us, "per_step_us": us / per, "calls_per_step": c / per,
             "share": us / total} for name, (c, us) in rows]


def summarize(trace: Mapping | list, top: int = 10) -> dict:
    """The figures of one profiled run (see the module docstring), JSON-able."""
    evs = events(trace)
    device, acts = activities(evs)
    steps, window = annotations(evs)
    busy = [(a.start_us, a.end_us) for a in acts]
    if window is None:      # no "window" range: from the first to the last event of the trace
        spans = [_span(e) for e in evs]
        window = (min(s[0] for s in spans), max(s[1] for s in spans)) if spans else (0.0, 0.0)
    if not window[1] > window[0]:
        raise ValueError(f"the trace's window {window} is empty: profile at least one call")
    spans = step_spans(acts)
    split = iv.split_idle(busy, list(spans.values()), window) if spans else None
    per_step = [sum(1 for a in acts if a.step == k and a.kind in ("kernel", "cpu_op")) for k in spans]
    threshold = GAP_US[device]
    gaps = launch_gaps(acts, spans, threshold)
    kernels = [a for a in acts if a.kind in ("kernel", "cpu_op")]
    return {
        "device": device, "method": GPU_IDLE_METHOD if device == "cuda" else CPU_OP_METHOD,
        "window_us": window[1] - window[0], "busy_us": iv.length(iv.clip(busy, window)),
        "idle_fraction": iv.idle_fraction(busy, window),
        "idle_between_steps": split["between_steps"] if split else None,
        "idle_within_steps": split["within_steps"] if split else None,
        "steps": len(spans), "host_steps": len(steps),
        "kernels": len(kernels), "copies": sum(1 for a in acts if a.kind in ("memcpy", "memset")),
        "kernels_per_step": median(per_step) if per_step else None,
        "step_us_median": median(b - a for a, b in spans.values()) if spans else None,
        "launch_gaps": {"threshold_us": threshold, "count": len(gaps),
                        "per_step": len(gaps) / len(spans) if spans else None,
                        "total_us": sum(b - a for a, b in gaps),
                        "median_us": median(b - a for a, b in gaps) if gaps else 0.0},
        "lanes": sorted({a.lane for a in acts}),
        "top_kernels": top_kernels(kernels, len(spans), top),
    }


def middle(ks: list[int], n: int) -> list[int]:
    """`n` consecutive steps from the middle of `ks`: a steady step, not the first one (which also
    starts threads, prefills prompts and warms caches)."""
    first = max(0, (len(ks) - n) // 2)
    return ks[first:first + n]


def gantt_rows(trace: Mapping | list, steps: int | None = 3, max_rows: int = 4000) -> list[dict]:
    """Activities of `steps` consecutive steps from the middle of the run (all when None), for a Gantt
    chart: lane, name, start and end in µs from the first one shown, step, kind. At most `max_rows`."""
    _, acts = activities(trace)
    ks = sorted({a.step for a in acts if a.step is not None})
    if steps is not None and ks:
        keep = set(middle(ks, steps))
        acts = [a for a in acts if a.step in keep]
    acts = acts[:max_rows]
    t0 = min((a.start_us for a in acts), default=0.0)
    return [{"lane": a.lane, "name": a.name, "start_us": round(a.start_us - t0, 3), "end_us": round(a.end_us - t0, 3),
             "step": a.step, "kind": a.kind} for a in acts]
