"""What a profiled run shows, in words that follow its numbers (notebooks 03, 05, 07, 10).

- `describe(summary, where)`: kernels per step, the step's length, where the device idled (between
  steps or between kernels inside a step), the costliest kernel, and the profiler's own overhead;
- `compare(a, b, names)`: two variants of the same work (eager against a CUDA graph, sync against
  async): kernels per step, step time (profiled and unprofiled) and idle, each change worded from
  `a` to `b`, the direction of its arrow;
- `event_vs_profiler(...)`: why the engine's step-bracket timeline and the profiler disagree on idle;
- `how_to_open(path)`: where a kept trace is and how to open it in Perfetto;
- `counted(n, word)` / `plural(shown, word)`: "1 kernel", "1488 kernels": the noun agrees with the
  number as printed.
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping

from .. import narrate
from .files import HOW_TO_OPEN


def _us(x: float) -> str:
    return f"{x / 1e3:.2f} ms" if x >= 1e3 else f"{x:.1f} µs"


def plural(shown: str, word: str) -> str:
    """The noun for a number as printed: '1' takes 'kernel'; '2', '0' and '1.0' take 'kernels'
    (a decimal, even 1.0, reads as plural)."""
    return word if shown.strip() == "1" else word + "s"


def counted(n: float, word: str, fmt: str = ".0f") -> str:
    """'1 kernel', '1488 kernels', '2.4 gaps': the number as printed, and the noun agreeing with it."""
    shown = format(n, fmt)
    return f"{shown} {plural(shown, word)}"


def _idle_name(s: Mapping, start: bool = False) -> str:
    if s.get("device") == "cuda":
        return "GPU idle"
    return ("Time" if start else "time") + " with no operator running (Python, dispatch)"


def describe(s: Mapping, where: str) -> str:
    """One paragraph about one profiled run (a `profiling.summarize` summary)."""
    unit = "kernel" if s.get("device") == "cuda" else "operator"
    parts = [f"{where}: **{counted(s['kernels_per_step'], unit)} per step**" if s.get("kernels_per_step") is not None
             else f"{where}: {counted(s['kernels'], unit)} in the window"]
    if s.get("step_us_median"):
        parts[0] += f", a step spanning **{_us(s['step_us_median'])}** on the {'GPU' if s.get('device') == 'cuda' else 'CPU'}"
    text = parts[0] + f". {_idle_name(s, start=True)}: **{s['idle_fraction']:.1%}** of the window"
    if s.get("idle_between_steps") is not None:
        text += (f" ({s['idle_between_steps']:.1%} between steps, waiting for the host; "
                 f"{s['idle_within_steps']:.1%} inside steps, between one step's {unit}s)")
    gaps = s.get("launch_gaps") or {}
    if gaps.get("count"):
        n = gaps["per_step"]
        text += (f". Inside a step, {counted(n, 'gap', '.1f')} of at least {gaps['threshold_us']:g} µs on average"
                 if n < 10 else f". Inside a step, {counted(n, 'gap')} of at least {gaps['threshold_us']:g} µs")
        text += f", {gaps['median_us']:.1f} µs each (median)"
    top = (s.get("top_kernels") or [None])[0]
    if top:
        calls = top["calls_per_step"]
        text += (f". The costliest {unit}: `{top['name'][:70]}`, {counted(calls, 'call')} "
                 f"for {_us(top['per_step_us'])} per step ({top['share']:.0%} of all {unit} time)")
    text += "."
    if s.get("profiler_overhead") is not None:
        o = s["profiler_overhead"]
        text += (f" The profiled pass took {_us(s['profiled_wall_s'] * 1e6)} against {_us(s['unprofiled_wall_s'] * 1e6)} "
                 f"unprofiled ({'+' if o >= 0 else '−'}{abs(o):.0%}: the profiler's own cost")
        if s.get("idle_fraction_corrected") is not None and s.get("device") == "cuda":
            text += (f"; with the same kernel time in the unprofiled run's window, GPU idle would be "
                     f"{s['idle_fraction_corrected']:.1%}")
        text += ")."
    return text


def unprofiled_step_us(s: Mapping) -> float | None:
    """Wall time per step of the unprofiled pass of the same work (µs), when the summary has it."""
    if s.get("unprofiled_wall_s") and s.get("steps"):
        return s["unprofiled_wall_s"] * 1e6 / s["steps"]
    return None


def _points(before: float, after: float) -> str:
    """'1.2% → 17.3% (16.1 points more)': a share's change worded from `before` to `after`."""
    delta = after - before
    words = narrate.direction(delta, "more", "less", "no change", tolerance=0.0005)
    change = words if words == "no change" else f"{abs(delta) * 100:.1f} points {words}"
    return f"{before:.1%} → {after:.1%} ({change})"


def compare(a: Mapping, b: Mapping, names: tuple[str, str]) -> str:
    """`b` against `a`: kernels per step, the step's span (under the profiler, and unprofiled when the
    summaries have the unprofiled pass) and the idle share. Every change is worded from `a` to `b`,
    as its arrow reads."""
    na, nb = names
    unit = "kernels" if a.get("device") == "cuda" else "operators"
    text = []
    if a.get("kernels_per_step") and b.get("kernels_per_step"):
        ka, kb = a["kernels_per_step"], b["kernels_per_step"]
        text.append(f"{nb} ran {kb:.0f} {unit} per step against {na}'s {ka:.0f} "
                    f"({narrate.more_or_less(kb, ka)} {na})" if abs(kb - ka) > 0.5 else
                    f"{nb} and {na} ran the same {ka:.0f} {unit} per step")
    if a.get("step_us_median") and b.get("step_us_median"):
        said = (f"under the profiler its step spanned {_us(b['step_us_median'])} against {_us(a['step_us_median'])}: "
                f"{narrate.speed(b['step_us_median'], a['step_us_median'])} {na}")
        ua, ub = unprofiled_step_us(a), unprofiled_step_us(b)
        if ua and ub:
            said += (f"; unprofiled, a step took {_us(ub)} against {_us(ua)} on average: "
                     f"{narrate.speed(ub, ua)} {na} (the profiler slows the host, so a host-bound step "
                     "stretches most under it)")
        text.append(said)
    text.append(f"{_idle_name(a)} {a['idle_fraction']:.1%} ({na}) → {b['idle_fraction']:.1%} ({nb})")
    if a.get("idle_within_steps") is not None and b.get("idle_within_steps") is not None:
        d_between = b["idle_between_steps"] - a["idle_between_steps"]
        d_within = b["idle_within_steps"] - a["idle_within_steps"]
        which = "between steps" if abs(d_between) >= abs(d_within) else "inside steps"
        text.append(f"between steps {_points(a['idle_between_steps'], b['idle_between_steps'])}, inside steps "
                    f"{_points(a['idle_within_steps'], b['idle_within_steps'])}, of the window: most of the change "
                    f"is {which}")
    return "; ".join(text) + "."


def event_vs_profiler(bracket_gap: float, profiler_idle: float, within: float | None, where: str) -> str:
    """Why the step-bracket timeline and the profiler give two idle figures for one loop."""
    text = (f"{where}: the step brackets (CUDA events around each whole step) leave {bracket_gap:.1%} of the "
            f"window empty, the profiler's kernel intervals {profiler_idle:.1%}. ")
    if profiler_idle > bracket_gap:
        text += ("The brackets count every gap *inside* a step, between its kernels, as busy; the profiler "
                 "sees those gaps as idle")
        text += f" ({within:.1%} of the window here)." if within is not None else "."
    else:
        text += ("Here the profiler finds no more idle than the brackets: the gaps inside steps are small, and "
                 "the profiler's own overhead stretches the window.")
    return text


def how_to_open(path: Path | str) -> str:
    """Where a kept trace is, and how to open it."""
    return f"The trace of this run is saved as `{path}`: {HOW_TO_OPEN}."
