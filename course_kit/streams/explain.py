"""What a sync/async pair of timelines shows, in words that follow the numbers (notebook 07).

The bound `wall / busiest lane` read from the *sync* timeline assumes every lane stays busy exactly
as long in the async run. It often does not: a GPU step queued behind another can run a little
faster or slower, and host work running beside a worker thread can stretch. So the measured gain
can land above the bound (a lane's busy time shrank) or below it (a lane's busy time grew). The
explainer computes each lane's busy time in both modes from the timelines and names the lane whose
busy time changed, which is the only cause the timelines show.

- `overlap_figures(sync, async_)`: wall times, busy times per lane, idle fractions, the bound read
  from the sync timeline and the bound with the async run's own busy times, the measured speed-up;
- `explain_overlap(figures)`: one paragraph, tested both ways (above/below the bound, faster/slower);
- `which_mattered(real, ideal)`: whether the host's competition with a worker thread mattered;
- `explain_blog(rows, summary)`: the async-batching blog's case, with the profiler's GPU idle.
"""
from __future__ import annotations

from typing import Iterable, Mapping, Sequence

from .. import narrate
from .timeline import Timeline

SAME_WITHIN = 0.02     # busy times or ratios within 2% are "about the same" (timer noise of a run)


def _tl(t: Timeline | Iterable[Mapping]) -> Timeline:
    return t if isinstance(t, Timeline) else Timeline.from_records(t)


def overlap_figures(sync: Timeline | Iterable[Mapping], async_: Timeline | Iterable[Mapping],
                    lanes: Sequence[str] = ("cpu", "gpu"), device_lane: str = "gpu") -> dict:
    """The figures of one sync/async pair: per mode wall and busy seconds per lane, idle of the
    device lane; the bound from the sync timeline, the bound with async's busy times, the speed-up."""
    if device_lane not in lanes:
        raise ValueError(f"device_lane {device_lane!r} must be one of lanes {list(lanes)}")
    out: dict = {"lanes": list(lanes), "device_lane": device_lane}
    for mode, t in (("sync", sync), ("async", async_)):
        tl = _tl(t)
        lo, hi = tl.window()
        if hi <= lo:
            raise ValueError(f"the {mode} timeline is empty (window {lo}..{hi}); it needs end > start")
        busy = {lane: (tl.busy_s(lane, (lo, hi)) if lane in tl.lanes else 0.0) for lane in lanes}
        out[mode] = {"wall_s": hi - lo, "busy_s": busy, "idle": 1.0 - busy[device_lane] / (hi - lo)}
    s, a = out["sync"], out["async"]
    busiest_sync = max(s["busy_s"].values())
    busiest_async = max(a["busy_s"].values())
    if busiest_sync <= 0 or busiest_async <= 0:
        raise ValueError("no lane was busy in one of the timelines; nothing to compare")
    out["speedup"] = s["wall_s"] / a["wall_s"]
    out["bound_sync"] = s["wall_s"] / busiest_sync
    out["bound_async_busy"] = s["wall_s"] / busiest_async
    out["busiest_sync_lane"] = max(s["busy_s"], key=s["busy_s"].get)
    return out


def _lane_changes(f: Mapping, grown: bool) -> list[str]:
    """'gpu 0.883 s -> 0.863 s (2.2% less)' for each lane whose busy time shrank (grown=False) or grew."""
    out = []
    for lane in f["lanes"]:
        b_s, b_a = f["sync"]["busy_s"][lane], f["async"]["busy_s"][lane]
        if b_s <= 0:
            continue
        change = b_a / b_s - 1.0
        if (change > SAME_WITHIN) if grown else (change < -SAME_WITHIN):
            out.append(f"the {lane} lane was busy {_t(b_s)} in sync and {_t(b_a)} in async "
                       f"({abs(change):.1%} {narrate.direction(change, 'more', 'less')})")
    return out


def _t(seconds: float) -> str:
    return f"{seconds:.3f} s" if seconds >= 1 else f"{seconds * 1e3:.1f} ms"


def idle_words(device_lane: str, device_name: str) -> str:
    """How the device lane's empty share is named. The engine's "gpu" lane holds one span per step,
    bracketed by CUDA events, so its gaps are the host's picture, never GPU idle (DESIGN.md: that is
    read from a profiler trace); a worker thread's lane holds the work itself."""
    if device_lane == "gpu":
        return "Time outside the GPU's step brackets (the host's picture; GPU idle comes from the profiler)"
    return f"{device_name} idle"


def with_throughput(f: Mapping, sync_tokens_per_s: float, async_tokens_per_s: float) -> dict:
    """`f` with its speed-up taken from the runs' throughputs (the same tokens in both modes, so
    tokens/s over the whole `generate` call) instead of the timelines' windows. A record's figure
    and chart use the throughput; the timeline's window starts at the first step and ends at the
    last, so it leaves out the run's start and drain and can give another ratio. One definition
    per sentence: this one, named as such by `explain_overlap`."""
    for name, v in (("sync_tokens_per_s", sync_tokens_per_s), ("async_tokens_per_s", async_tokens_per_s)):
        if not isinstance(v, (int, float)) or not v > 0:
            raise ValueError(f"{name} must be a positive throughput, got {v!r}")
    return {**f, "speedup": async_tokens_per_s / sync_tokens_per_s,
            "throughput": (sync_tokens_per_s, async_tokens_per_s)}


def _speed_sentence(f: Mapping) -> str:
    """'Async ran 1.09x faster than sync (throughput 7,691 → 8,362 tokens/s ...)': the speed-up that
    the rest of the paragraph uses, with what it was computed from."""
    s, a = f["sync"], f["async"]
    windows = f"{_t(s['wall_s'])} → {_t(a['wall_s'])}"
    if "throughput" not in f:
        return f"Async ran {narrate.speed(a['wall_s'], s['wall_s'])} sync (wall time {windows})."
    tps_s, tps_a = f["throughput"]
    return (f"Async ran {narrate.rate(tps_a, tps_s)} sync (throughput {tps_s:,.0f} → {tps_a:,.0f} tokens/s over "
            f"each whole run; the same runs' timelines, from the first step to the last, span {windows}).")


def explain_overlap(f: Mapping, device_name: str = "GPU") -> str:
    """The paragraph for one pair (from `overlap_figures`, or `with_throughput` of it): the device
    lane's empty share before and after, the speed-up in words, the bound, and why the speed-up sits
    where it does."""
    s, a = f["sync"], f["async"]
    speedup, bound = f["speedup"], f["bound_sync"]
    lane = f["busiest_sync_lane"]
    text = (f"{idle_words(f['device_lane'], device_name)}: {s['idle']:.1%} (sync) → {a['idle']:.1%} (async). "
            f"{_speed_sentence(f)} The bound read from the sync timeline, wall time / busiest lane "
            f"({lane}, busy {_t(s['busy_s'][lane])}), is {bound:.2f}x. ")
    shrank, grew = _lane_changes(f, grown=False), _lane_changes(f, grown=True)
    if speedup > bound * (1 + SAME_WITHIN / 2):
        text += ("The measured speed-up is above that bound because the busy times changed between "
                 "the modes (the bound assumes they stay as in sync): "
                 + ("; ".join(shrank) if shrank else "busy times changed by less than 2% per lane, "
                    "which is within timer noise")
                 + f". With the async run's own busy times the bound is {f['bound_async_busy']:.2f}x.")
    elif speedup < 1 - narrate.SAME_WITHIN:
        idle_fell = a["idle"] < s["idle"] - SAME_WITHIN
        text += ("Async was slower: " + ("overlap removed idle time but not wall time. " if idle_fell else
                                         f"the {f['device_lane']} lane did not idle less. ")
                 + ("The timelines show why: " + "; ".join(grew) + ", so work ran longer beside "
                    "the other lane than on its own." if grew else
                    "No lane's busy time grew by more than 2%, so the timelines do not show why."))
    else:
        reached = (speedup - 1) / (bound - 1) if bound > 1 + 1e-9 else 1.0
        text += (f"The speed-up is within the bound: {max(reached, 0):.0%} of the gain it allows was "
                 "realised" + (f"; {'; '.join(grew)}, which is part of what was not gained."
                               if grew else "."))
    return text


def explain_pair(sync: Timeline | Iterable[Mapping], async_: Timeline | Iterable[Mapping],
                 lanes: Sequence[str] = ("cpu", "gpu"), device_lane: str = "gpu",
                 device_name: str = "GPU", throughput: tuple[float, float] | None = None) -> str:
    """`explain_overlap(overlap_figures(...))` in one call; `throughput` (sync, async tokens/s): the
    speed-up is their ratio (`with_throughput`), else the timelines' windows'."""
    f = overlap_figures(sync, async_, lanes, device_lane)
    return explain_overlap(with_throughput(f, *throughput) if throughput else f, device_name)


def _growth(f: Mapping, lane: str) -> float | None:
    """How much longer `lane` was busy in async than in sync (0.14: 14% longer); None if idle in sync."""
    b_s = f["sync"]["busy_s"].get(lane, 0.0)
    return f["async"]["busy_s"].get(lane, 0.0) / b_s - 1.0 if b_s > 0 else None


def which_mattered(real: Mapping, ideal: Mapping, host_lane: str = "cpu") -> str:
    """Section 5 of notebook 07 runs the loop twice: with a worker thread doing real matmuls (it
    competes with the host for cores and the interpreter lock) and with a device that sleeps through
    its steps (no competition). From the two pairs' `overlap_figures`: did the competition matter in
    this run? It did on a side whose busy time grew more in async beside the real worker than beside
    the sleeping device: the host's (its work stretched) or the device's (the matmuls stretched
    while running beside the host). Both lanes are read; the sentence names each that did."""
    device_lane = real["device_lane"]
    grow = {lane: (_growth(real, lane), _growth(ideal, lane)) for lane in (host_lane, device_lane)}
    idle = [lane for lane, g in grow.items() if None in g]
    if idle:
        return (f"The {idle[0]} lane did no work in one of the sync runs, so the timelines cannot say "
                "which mattered.")
    (h_real, h_ideal), (d_real, d_ideal) = grow[host_lane], grow[device_lane]
    figures = (f"in async the host's work took {_pct_change(h_real)} beside the worker doing real matmuls "
               f"and {_pct_change(h_ideal)} beside the sleeping device; the device's steps took "
               f"{_pct_change(d_real)} with real matmuls and {_pct_change(d_ideal)} asleep")
    host_hit, device_hit = h_real > h_ideal + SAME_WITHIN, d_real > d_ideal + SAME_WITHIN
    gpu_note = "with a real GPU the kernels use no host core, as in the second run."
    if host_hit and device_hit:
        return (f"In this run the competition for the CPU mattered on both sides: {figures}. Host and worker "
                f"shared the cores and Python's interpreter lock, so each ran longer beside the other; {gpu_note}")
    if device_hit:
        return (f"In this run the competition for the CPU mattered on the device's side: {figures}. The real "
                f"matmuls ran longer while the host worked beside them (the worker needs the cores and Python's "
                f"interpreter lock the host holds), so overlap gained little; {gpu_note}")
    if host_hit:
        return (f"In this run the competition for the CPU mattered on the host's side: {figures}. The host's "
                f"work stretched because the worker thread used the cores it needed; {gpu_note}")
    if h_real < h_ideal - SAME_WITHIN:
        return (f"In this run the competition for the CPU does not explain the stretch: {figures}. Neither side "
                f"grew more beside the real matmuls; the host's work grew more beside a device that uses no "
                f"core, so what stretched it is the loop itself (handing each step to the worker and waiting "
                f"for it).")
    return (f"In this run the competition for the CPU did not matter: {figures} (each side within "
            f"{SAME_WITHIN:.0%} of the other run, or less). What separates the two runs is the device's step time.")


def _pct_change(g: float) -> str:
    if abs(g) <= SAME_WITHIN:
        return "about as long as in sync"
    return f"{abs(g):.0%} {'longer' if g > 0 else 'less long'} than in sync"


def _time_words(wall_sync: float, wall_async: float) -> tuple[float, str]:
    saved = 1.0 - wall_async / wall_sync
    if abs(saved) <= narrate.SAME_WITHIN:
        return saved, f"about the same time in both modes (within {narrate.SAME_WITHIN:.0%})"
    if wall_async >= 2 * wall_sync:     # "304.5% more time" reads worse than "4.04x as long"
        return saved, f"{wall_async / wall_sync:.2f}x as long in async mode"
    return saved, (f"{saved:.1%} less time in async mode" if saved > 0 else f"{-saved:.1%} more time in async mode")


def explain_blog(rows: Sequence[Mapping], summary: Mapping) -> str:
    """The async-batching blog's case from a record (`course-kit bench async`, `blog_results`): per
    system, GPU idle sync -> async and the time saved, a failed mode with its error, then the claim."""
    claim = summary["claim"]
    if summary.get("error"):
        return (f"The run of this case failed: {summary['error'].splitlines()[0][:300]}. The lecture's claim "
                f"({claim['source']}) stays unchecked here.")
    by = {(r["system"], r["mode"]): r for r in rows}
    lines = []
    for system in dict.fromkeys(r["system"] for r in rows):
        s, a = by.get((system, "sync"), {}), by.get((system, "async"), {})
        failed = [f"{m} mode failed ({r['error'].splitlines()[0][:200]})" for m, r in (("sync", s), ("async", a))
                  if r.get("error")]
        if failed:
            ran = [f"{m} mode ran at {r['tokens_per_s']:,.0f} tokens/s"
                   + (f" with the GPU idle {r['gpu_idle_fraction']:.1%}" if r.get("gpu_idle_fraction") is not None else "")
                   for m, r in (("sync", s), ("async", a)) if r and not r.get("error")]
            lines.append(f"- **{system}**: " + "; ".join(ran + failed) + ".")
            continue
        if not s or not a:
            continue
        saved, words = _time_words(s["wall_s"], a["wall_s"])
        measured = s.get("gpu_idle_fraction") is not None and a.get("gpu_idle_fraction") is not None
        idle = (f"GPU idle {s['gpu_idle_fraction']:.1%} (sync) → {a['gpu_idle_fraction']:.1%} (async)"
                if measured else "GPU idle not measured (no GPU in this run)")
        vs = ""
        if abs(saved) > narrate.SAME_WITHIN:
            where = narrate.above_or_below(saved, claim["time_saved"], same_within=0.1)
            vs = (f", {'about the same as' if where == 'at' else where} the blog's "
                  f"{claim['time_saved']:.0%}" if saved > 0 else "")
        lines.append(f"- **{system}**: {idle}, and the run took {words}{vs} (throughput "
                     f"{s['tokens_per_s']:,.0f} → {a['tokens_per_s']:,.0f} tokens/s)"
                     + (idle_vs_time(s["gpu_idle_fraction"], a["gpu_idle_fraction"], saved) if measured else ".")
                     + (_overhead_words(s, a) if measured else ""))
    lines.append(f"The lecture's claim ({claim['source']}): on an {claim['model']} model at batch "
                 f"{claim['batch']}, GPU idle {claim['sync_gpu_idle']:.0%} → {claim['async_gpu_idle']:.1%} and "
                 f"{claim['time_saved']:.0%} less time ({claim['sync_s']} s → {claim['async_s']} s). Here: "
                 f"{summary['model']}, batch {summary['batch']}, {summary['new_tokens']} new tokens per request"
                 + ("; the engine's sync and async tokens are identical" if summary.get("engine_tokens_identical")
                    else "; the engine's sync and async tokens differ") + ".")
    lines.append(blog_token_agreement(summary))
    return "\n".join(line for line in lines if line)


def idle_vs_time(idle_sync: float, idle_async: float, saved: float) -> str:
    """': less idle and less time' or ': the GPU idled less, yet the run took longer ...': whether a
    change of GPU idle came with the time change the reader would expect from it. `saved`: the share
    of the sync time that async saved (negative: it took longer)."""
    d_idle = idle_async - idle_sync
    if abs(d_idle) <= SAME_WITHIN:
        return ": about as much GPU idle in both modes."
    if abs(saved) <= narrate.SAME_WITHIN:
        return (f": the GPU idled {narrate.direction(d_idle, 'more', 'less')}, yet the run took about as long, "
                "so the idle share alone does not say which mode was faster.")
    idle_fell, time_fell = d_idle < 0, saved > 0
    if idle_fell == time_fell:
        return (f": {narrate.direction(d_idle, 'more', 'less')} idle and "
                f"{narrate.direction(-saved, 'more', 'less')} time.")
    # idle share and time moved the same way for the GPU's busy time: busy = (1 - idle) * time
    return (f": the GPU idled {narrate.direction(d_idle, 'more', 'less')}, yet the run took "
            f"{narrate.direction(-saved, 'longer', 'less time')}; the GPU's busy time "
            f"{narrate.direction(-saved, 'grew', 'shrank')} with the run, so the "
            f"{narrate.direction(d_idle, 'larger', 'smaller')} idle share is no gain in speed.")


def _overhead_words(s: Mapping, a: Mapping) -> str:
    """' Idle read from profiled passes: the profiler slowed the runs by 12% and 18%.' when the rows
    carry it. A profiled pass that ran as fast as its unprofiled run, or faster, is said so: the
    profiler's cost was then smaller than the variation between runs, never a negative overhead."""
    o = {"sync": s.get("profiler_overhead"), "async": a.get("profiler_overhead")}
    if any(v is None for v in o.values()):
        return ""
    if all(v > narrate.SAME_WITHIN for v in o.values()):
        return (f" Idle read from profiled passes: the profiler slowed the runs by {o['sync']:.0%} and "
                f"{o['async']:.0%}.")

    def took(v: float) -> str:
        return (f"{abs(v):.0%} {narrate.direction(v, 'longer', 'shorter')}" if abs(v) > narrate.SAME_WITHIN
                else f"about as long (within {narrate.SAME_WITHIN:.0%})")
    text = ("Idle read from profiled passes, which took, against the unprofiled runs: "
            + ", ".join(f"{mode} {took(v)}" for mode, v in o.items()))
    if min(o.values()) < -narrate.SAME_WITHIN:
        return (f" {text}. A profiled pass that runs faster than the unprofiled one: the profiler's cost "
                "was smaller than the variation between runs.")
    if max(o.values()) <= narrate.SAME_WITHIN:
        return f" {text}: the profiler's cost was within the variation between runs."
    return f" {text}."


def blog_token_agreement(summary: Mapping) -> str:
    """How far the blog case's tokens agree across systems and modes, and what that can mean."""
    hf_modes, engine_hf = summary.get("hf_sync_async_agreement"), summary.get("engine_hf_agreement")
    if engine_hf is None:
        return ""
    dtype = summary.get("dtype", "the run's dtype")

    def pct(x: float) -> str:   # 99.98% must not print as 100.0%
        return f"{x:.2%}" if 0.999 <= x < 1 else f"{x:.1%}"
    text = f"Greedy tokens: the engine's and HF's (sync) agree at {pct(engine_hf)} of positions"
    if hf_modes is not None:
        text += f", HF's sync and async at {pct(hf_modes)}"
    if engine_hf >= 0.99:
        return text + "."
    if dtype == "float32":
        return text + ": in float32 the two should give the same tokens, so this run shows a real difference."
    return (text + f". In {dtype}, two correct implementations round differently (their kernels "
            "and fusions differ); on random weights many top-2 logits are near-ties, a flipped "
            "tie changes the rest of that text, and the deeper the model the larger the drift. The oracle is "
            "float32: there the engine must give HF's tokens exactly (its tests; for this shape "
            "`scripts/diag_blog_tokens.py`, log in `data/reference/h200/logs/`).")

