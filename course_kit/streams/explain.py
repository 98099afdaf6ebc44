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


def explain_overlap(f: Mapping, device_name: str = "GPU") -> str:
    """The paragraph for one pair (from `overlap_figures`): the device lane's empty share before and
    after, the speed-up in words, the bound, and why the speed-up sits where it does."""
    s, a = f["sync"], f["async"]
    speedup, bound = f["speedup"], f["bound_sync"]
    lane = f["busiest_sync_lane"]
    text = (f"{idle_words(f['device_lane'], device_name)}: {s['idle']:.1%} (sync) → {a['idle']:.1%} (async). Async ran "
            f"{narrate.speed(a['wall_s'], s['wall_s'])} sync (wall time {_t(s['wall_s'])} → "
            f"{_t(a['wall_s'])}). The bound read from the sync timeline, wall time / busiest lane "
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
                 device_name: str = "GPU") -> str:
    """`explain_overlap(overlap_figures(...))` in one call."""
    return explain_overlap(overlap_figures(sync, async_, lanes, device_lane), device_name)


def which_mattered(real: Mapping, ideal: Mapping, lane: str = "cpu") -> str:
    """Section 5 of notebook 07 runs the loop twice: with a worker thread doing real matmuls (it
    competes with the host for cores and the interpreter lock) and with a device that sleeps through
    its steps (no competition). From the two pairs' `overlap_figures`: did the competition matter in
    this run? It did when the host's busy time grew more in async beside the real worker."""
    grow = {name: f["async"]["busy_s"][lane] / f["sync"]["busy_s"][lane] - 1.0
            for name, f in (("real", real), ("ideal", ideal)) if f["sync"]["busy_s"][lane] > 0}
    if len(grow) < 2:
        return f"The {lane} lane did no work in one of the runs, so the timelines cannot say which mattered."
    g_real, g_ideal = grow["real"], grow["ideal"]
    figures = (f"in async the host's work took {_pct_change(g_real)} beside the worker doing real matmuls, "
               f"and {_pct_change(g_ideal)} beside the sleeping device")
    if g_real > g_ideal + SAME_WITHIN:
        return (f"In this run the competition for the CPU mattered: {figures}. The host's work stretched "
                f"because the worker thread used the cores it needed; with a real GPU the kernels use no "
                f"host core, as in the second run.")
    if g_real >= g_ideal - SAME_WITHIN:
        return (f"In this run the competition for the CPU did not matter: {figures} (within "
                f"{SAME_WITHIN:.0%} of each other). What separates the two runs is the device's step time.")
    return (f"In this run the competition for the CPU does not explain the stretch: {figures}. The host's "
            f"work grew more beside a device that uses no core, so what stretched it is the loop itself "
            f"(handing each step to the worker and waiting for it), not the cores the real matmuls took.")


def _pct_change(g: float) -> str:
    if abs(g) <= SAME_WITHIN:
        return "about as long as in sync"
    return f"{abs(g):.0%} {'longer' if g > 0 else 'less long'} than in sync"


def _time_words(wall_sync: float, wall_async: float) -> tuple[float, str]:
    saved = 1.0 - wall_async / wall_sync
    if abs(saved) <= narrate.SAME_WITHIN:
        return saved, f"about the same time in both modes (within {narrate.SAME_WITHIN:.0%})"
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
        idle = (f"GPU idle {s['gpu_idle_fraction']:.1%} (sync) → {a['gpu_idle_fraction']:.1%} (async)"
                + _overhead_words(s, a)
                if s.get("gpu_idle_fraction") is not None and a.get("gpu_idle_fraction") is not None
                else "GPU idle not measured (no GPU in this run)")
        vs = ""
        if abs(saved) > narrate.SAME_WITHIN:
            where = narrate.above_or_below(saved, claim["time_saved"], same_within=0.1)
            vs = (f", {'about the same as' if where == 'at' else where} the blog's "
                  f"{claim['time_saved']:.0%}" if saved > 0 else "")
        lines.append(f"- **{system}**: {idle}; throughput {s['tokens_per_s']:,.0f} → {a['tokens_per_s']:,.0f} "
                     f"tokens/s, {words}{vs}.")
    lines.append(f"The lecture's claim ({claim['source']}): on an {claim['model']} model at batch "
                 f"{claim['batch']}, GPU idle {claim['sync_gpu_idle']:.0%} → {claim['async_gpu_idle']:.1%} and "
                 f"{claim['time_saved']:.0%} less time ({claim['sync_s']} s → {claim['async_s']} s). Here: "
                 f"{summary['model']}, batch {summary['batch']}, {summary['new_tokens']} new tokens per request"
                 + ("; the engine's sync and async tokens are identical" if summary.get("engine_tokens_identical")
                    else "; the engine's sync and async tokens differ") + ".")
    lines.append(blog_token_agreement(summary))
    return "\n".join(line for line in lines if line)


def _overhead_words(s: Mapping, a: Mapping) -> str:
    """' (profiled; the profiler slowed the runs by 12% and 18%)' when the rows carry it."""
    o = [r.get("profiler_overhead") for r in (s, a)]
    if any(v is None for v in o):
        return ""
    return f" (profiled; the profiler slowed the runs by {o[0]:.0%} and {o[1]:.0%})"


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

