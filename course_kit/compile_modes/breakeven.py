"""When does compiling pay? Compile time against the time saved per call, and the sentences of
notebook 03 that compare modes (computed from the run's or the record's numbers, never typed).

- `break_even_calls`: the number of calls after which a compiled mode has saved its compile time.
- `total_time`: wall time of N calls in a mode, compile included (the break-even widget's curves).
- `explain_breakeven`, `explain_chain`, `explain_decode`: "what just happened" for sections 3 and 6;
- `explain_fusion_bound`: whether fused code stayed within the traffic ratio, or what else it removed
  (launches only as far as a profile shows eager's GPU waiting for them: `idle_inside_call_s`);
- `model_difference`: how a live model differs from the record's, said beside a live headline;
- `explain_cold_warm`: compile time and break-even from an empty cache and from a warm one.
"""
from __future__ import annotations

import math
from typing import Mapping

from .. import narrate


def break_even_calls(compile_s: float, steady_s: float, eager_s: float) -> float:
    """Calls N at which compile_s + N * steady_s = N * eager_s; inf when the compiled call is not faster."""
    for name, v in (("compile_s", compile_s), ("steady_s", steady_s), ("eager_s", eager_s)):
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
            raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
    saved = eager_s - steady_s
    if saved <= 0:
        return math.inf
    return compile_s / saved


def total_time(row: Mapping, calls: float) -> float:
    """Seconds for `calls` calls in the row's mode: its compile time once, then steady calls."""
    if calls < 0:
        raise ValueError(f"calls must be >= 0, got {calls!r}")
    compile_s = 0.0 if row["mode"] == "eager" else (row.get("compile_s") or 0.0)
    return compile_s + calls * row["steady_s"]


def _us(s: float) -> str:
    return f"{s * 1e6:,.1f} µs" if s < 1e-3 else f"{s * 1e3:,.2f} ms"


def _calls(n: float) -> str:
    return "never" if math.isinf(n) else f"after about {max(n, 1):,.0f} calls"


def explain_breakeven(eager: Mapping, row: Mapping, calls: int) -> str:
    """After `calls` calls: eager's total, the mode's total (compile included), which is less, and the
    break-even point."""
    if row["mode"] == "eager":
        return f"{calls:,} eager calls take {total_time(eager, calls):,.3g} s; eager compiles nothing."
    te, tm = total_time(eager, calls), total_time(row, calls)
    n = break_even_calls(row.get("compile_s") or 0.0, row["steady_s"], eager["steady_s"])
    per_call = narrate.speed(row["steady_s"], eager["steady_s"])
    text = (f"`{row['mode']}`: compiling took {row.get('compile_s') or 0.0:,.2f} s, then each call ran "
            f"{_us(row['steady_s'])} against eager's {_us(eager['steady_s'])} ({per_call} eager). "
            f"After {calls:,} calls: eager {te:,.3g} s, `{row['mode']}` {tm:,.3g} s with its compile: ")
    if math.isinf(n):
        text += "compiling never pays here, as each compiled call is not faster."
    elif calls >= n:
        text += f"compiling has paid for itself ({_calls(n)}), saving {te - tm:,.3g} s so far."
    else:
        text += f"not yet paid for; it pays {_calls(n)}."
    return text


def _static_gap(gap_s: float) -> str:
    """What a static-input run as slow as the plain one shows: the copy is ruled out only if the mark
    took effect, and the timings alone cannot say whether it did."""
    return ("Either copying the inputs into the CUDA graph's own buffers is not what costs the "
            f"{_us(gap_s)}, or the mark did not spare that copy: the timings cannot tell which (a profile of these "
            "calls would show whether copies still run before each replay), and do not show what does cost it.")


def explain_chain(rows: Mapping[str, Mapping], input_bytes: int | None = None,
                  copy_gbs: float | None = None) -> str:
    """Section 3: each mode on the elementwise chain against eager and against `default`. Where
    `reduce-overhead` is slower than `default`, its copy of the inputs into the CUDA graph's own
    buffers is named: measured when a static-input run is among the rows, else estimated from the
    inputs' bytes and a copy bandwidth (and labelled an estimate). A static-input run as slow as the
    plain one does not rule the copy out: nothing here shows that the mark took effect."""
    if "eager" not in rows or "default" not in rows:
        raise ValueError(f"need eager and default rows, got {sorted(rows)}")
    e, d = rows["eager"], rows["default"]
    n = break_even_calls(d.get("compile_s") or 0.0, d["steady_s"], e["steady_s"])
    text = (f"Eager: {_us(e['steady_s'])} per call. `default`: {_us(d['steady_s'])}, "
            f"{narrate.speed(d['steady_s'], e['steady_s'])} eager, after a first call of {d['first_call_s']:.2f} s; "
            + ("compiling pays for itself " + _calls(n) + "." if not math.isinf(n)
               else "each compiled call is not faster, so compiling never pays for itself at this size."))
    static = rows.get("reduce-overhead (static inputs)")
    for m, r in rows.items():
        # the static-input run is worded inside reduce-overhead's line, against it: one explainer for both
        if m in ("eager", "default", "reduce-overhead (static inputs)") or not r.get("steady_s"):
            continue
        text += (f"\n- `{m}`: {_us(r['steady_s'])}, {narrate.speed(r['steady_s'], e['steady_s'])} eager and "
                 f"{narrate.speed(r['steady_s'], d['steady_s'])} `default`; compile {r.get('compile_s') or 0.0:.1f} s.")
        slower = r["steady_s"] > d["steady_s"] * (1 + narrate.SAME_WITHIN)
        if m == "reduce-overhead" and static and static.get("steady_s") and not slower:
            text += (f" With its inputs marked as static addresses it ran {_us(static['steady_s'])}, "
                     f"{narrate.speed(static['steady_s'], r['steady_s'])} without.")
        if m == "reduce-overhead" and slower:
            gap = r["steady_s"] - d["steady_s"]
            if static and static.get("steady_s"):
                saved = r["steady_s"] - static["steady_s"]
                text += (f" With its inputs marked as static addresses (`torch._dynamo.mark_static_address`), "
                         f"the same mode ran {_us(static['steady_s'])}, "
                         f"{narrate.speed(static['steady_s'], r['steady_s'])} without, and "
                         f"{narrate.speed(static['steady_s'], d['steady_s'])} `default`")
                if saved <= narrate.SAME_WITHIN * r["steady_s"]:
                    # the static run is as slow; whether the mark spared the copy is seen only in a profile
                    text += ": marking the inputs static did not close the gap. " + _static_gap(gap)
                else:
                    text += (f": copying the inputs into the CUDA graph's own buffers before each replay accounts "
                             f"for {_us(saved)} of the {_us(gap)} gap ({min(saved / gap, 1.0):.0%}).")
            elif input_bytes and copy_gbs:
                est = 2 * input_bytes / (copy_gbs * 1e9)
                text += (f" A CUDA graph replays at fixed addresses, so before each replay this mode copies inputs "
                         f"that are not static into its own buffers: {input_bytes / 2**20:,.0f} MiB here, read and "
                         f"written, about {_us(est)} at {copy_gbs:,.0f} GB/s (an estimate, not measured in this run), "
                         f"against a gap of {_us(gap)} to `default`.")
            else:
                text += " This run does not show why it is slower than `default`."
    return text


def idle_inside_call_s(profile: Mapping | None) -> float | None:
    """Seconds per call that the device sat idle *inside* a call, between its kernels, in a profiled
    pass (a `profiling.trace.summarize` summary): the share of the window idle inside steps, times the
    window, over the steps. None when the summary lacks any of them."""
    if not profile:
        return None
    frac, window_us, steps = (profile.get(k) for k in ("idle_within_steps", "window_us", "steps"))
    if frac is None or not window_us or not steps:
        return None
    return frac * window_us / steps / 1e6


def _gpu_wait(profile: Mapping, idle_s: float) -> str:
    """How long eager's GPU waited inside a call, with the figures it comes from."""
    text = (f"eager's GPU sat idle {_us(idle_s)} inside each call, between its kernels "
            f"({profile['idle_within_steps']:.1%} of the profiled window")
    gaps = profile.get("launch_gaps") or {}
    if gaps.get("count"):
        text += (f"; per call, {gaps['per_step']:.1f} gaps of at least {gaps['threshold_us']:g} µs, "
                 f"{gaps['median_us']:.1f} µs each by the median")
    return text + ")"


def _beyond_traffic(excess_s: float, removed: int, op_cost_s: float | None, profile: Mapping | None) -> str:
    """What the excess of eager's time over the traffic ratio was: launches (the GPU waited for them),
    or eager's kernels themselves. Launches can cost a GPU call only the time its GPU sat idle inside
    the call; on a CPU, nothing runs while an operator is dispatched, so its cost is never hidden."""
    idle = idle_inside_call_s(profile) if profile and profile.get("device") == "cuda" else None
    slower = ("moved their bytes more slowly than the fused one. The traffic ratio bounds fusion's gain only when "
              "every kernel runs at the same rate, and here they did not.")
    host = (f"one operator's launch and dispatch cost on this machine ({_us(op_cost_s)}, measured on a one-element "
            f"add)") if op_cost_s is not None else None
    if idle is not None:
        if idle >= excess_s:
            return (f". The profile shows {_gpu_wait(profile, idle)}: that covers the excess, so the GPU was "
                    f"waiting for the host's launches, and those launches are what fusion removed beyond the traffic."
                    + (f" For scale, {host}." if host else ""))
        text = (f". The profile shows {_gpu_wait(profile, idle)}: launches can account for at most that much of "
                f"the {_us(excess_s)}, so the other {_us(excess_s - idle)} was in eager's kernels themselves: they "
                + slower)
        if op_cost_s is not None and op_cost_s * removed > idle:
            text += (f" A one-element add timed alone takes {_us(op_cost_s)} (launch, dispatch and the wait for it), "
                     f"more than the GPU waited here: the host issued the launches while earlier kernels still "
                     f"ran, so they overlapped the kernels instead of adding to the call.")
        return text
    if host is None:
        return (". This run measured neither a launch's cost nor a profile of eager's calls, so it cannot say whether "
                "launches or slower kernels make up the excess.")
    if excess_s / removed > 2 * op_cost_s:
        return f", more than {host}. So eager's kernels " + slower
    if profile and profile.get("device") == "cpu":
        return (f", about {host}. On a CPU nothing runs while an operator is dispatched, so that cost adds to every "
                f"call: the launches and dispatches are what fusion removed beyond the traffic.")
    return (f", about {host}. Without a profile of eager's calls this run cannot tell whether its GPU waited for "
            f"those launches (then they are what fusion removed beyond the traffic) or ran them behind its kernels "
            f"(then eager's kernels moved their bytes more slowly).")


def explain_fusion_bound(eager_s: float, fused_s: float, traffic_ratio: float, eager_ops: int,
                         fused_kernels: int, op_cost_s: float | None, eager_profile: Mapping | None = None) -> str:
    """Was fusion's gain within the traffic ratio (the bytes eager moves over the fused kernel's)?
    That ratio bounds the gain only if every kernel moves its bytes at the same rate. Above it, the
    excess of eager's time, `eager_s - traffic_ratio * fused_s`, is set against what launches could
    have cost: on a GPU, at most the idle time inside eager's call in `eager_profile` (a profiling
    summary of the same chain); without one, one operator's launch and dispatch cost (`op_cost_s`)
    is a hint, not a conclusion. Else the eager kernels moved their bytes more slowly."""
    for name, v in (("eager_s", eager_s), ("fused_s", fused_s), ("traffic_ratio", traffic_ratio)):
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
            raise ValueError(f"{name} must be a finite number > 0, got {v!r}")
    speedup = eager_s / fused_s
    text = (f"The fused kernel ran {narrate.speed(fused_s, eager_s)} eager's {eager_ops} operators; the traffic "
            f"ratio is {traffic_ratio:.2f}x. ")
    if speedup < 1 - narrate.SAME_WITHIN:
        return text + (f"Fewer bytes, yet more time: the extra {_us(fused_s - eager_s)} per call is outside the "
                       f"traffic, in what a compiled call costs on its own (checking Dynamo's guards, entering the "
                       f"compiled wrapper), which at this size outweighs the bytes saved.")
    if speedup <= 1 + narrate.SAME_WITHIN:
        return text + "At this size fusion gained nothing measurable: the bytes it saves take too little time."
    if speedup <= traffic_ratio * (1 + narrate.SAME_WITHIN):
        reached = (speedup - 1) / (traffic_ratio - 1) if traffic_ratio > 1 else 1.0
        return text + (f"That is within the ratio ({max(reached, 0):.0%} of the gain it allows): what fusion "
                       f"removed here is memory traffic.")
    removed = max(eager_ops - fused_kernels, 1)
    excess = eager_s - traffic_ratio * fused_s
    text += (f"That is above the ratio, so fusion removed more than traffic: eager took {_us(excess)} "
             f"longer than its bytes would at the fused kernel's rate, {_us(excess / removed)} for each of the "
             f"{removed} operators fusion removed")
    return text + _beyond_traffic(excess, removed, op_cost_s, eager_profile)


def explain_cold_warm(cold_s: float, warm: Mapping, eager: Mapping, cache: str) -> str:
    """Compiling from an empty on-disk cache (`cold_s`) and again with it holding the compiled graph
    (`warm`, a mode row), each with its break-even against `eager`. `cache` names the cache."""
    warm_s = warm.get("compile_s") or 0.0
    n_cold = break_even_calls(cold_s, warm["steady_s"], eager["steady_s"])
    n_warm = break_even_calls(warm_s, warm["steady_s"], eager["steady_s"])
    text = (f"Compiling `{warm['mode']}` from an empty cache took {cold_s:.2f} s; compiling it again after "
            f"`torch._dynamo.reset()`, with {cache} holding the result, took {warm_s:.2f} s. ")
    if warm_s < cold_s * (1 - narrate.SAME_WITHIN):
        text += ("Dynamo traced the function again (reset empties its in-memory cache), but Inductor found the "
                 "compiled graph in that cache and skipped generating and building its kernel: the on-disk cache "
                 "made the difference. ")
    else:
        text += "The warm compile was not faster here: the cache did not help this time. "
    if math.isinf(n_cold):
        return text + "Each compiled call is not faster than eager, so neither compile ever pays."
    return text + f"Cold, compiling pays {_calls(n_cold)}; warm, {_calls(n_warm)}."


def _model_words(spec: Mapping) -> str:
    return f"{spec['n_layers']} layers at width {spec['d_model']}, vocabulary {spec['vocab']:,}"


def model_difference(live: Mapping, recorded: Mapping | None, what: str = "decode step") -> str:
    """`why` for a live figure beside its record: how this run's model (a spec with n_layers, d_model,
    vocab) differs from the record's, from both specs; "" when they agree or the record has none."""
    if not recorded:
        return ""
    keys = ("n_layers", "d_model", "vocab")
    missing = [k for k in keys if k not in live]
    if missing:
        raise ValueError(f"the live model spec lacks {missing}: {dict(live)}")
    if any(k not in recorded for k in keys) or all(live[k] == recorded[k] for k in keys):
        return ""
    return f"this run's {what} is {_model_words(live)}, the record's {_model_words(recorded)}"


def explain_decode(rows: Mapping[str, Mapping], gpu: str) -> str:
    """Section 6: the batch-1 decode step per mode against eager, and what the record shows about
    where eager's time goes: eager's own kernels' GPU time (profiled) against its step, so the rest
    is outside the kernels. A CUDA graph's step does not bound eager's kernel time: Inductor's graph
    runs other kernels (more of them, in the 2026-11-30 record) than eager does."""
    if "eager" not in rows:
        raise ValueError(f"need the eager row, got {sorted(rows)}")
    e = rows["eager"]
    text = f"On the {gpu}, the batch-1 decode step: eager {_us(e['steady_s'])}"
    for m, r in rows.items():
        if m != "eager" and r.get("steady_s"):
            text += f"; `{m}` {_us(r['steady_s'])}, **{narrate.speed(r['steady_s'], e['steady_s'])}** eager"
    text += "."
    ro, d = rows.get("reduce-overhead"), rows.get("default")
    if e.get("launch_calls_per_call"):
        text += (f" Eager makes {e['launch_calls_per_call']:.0f} launch calls from the host per step, for "
                 f"{e.get('gpu_kernels_per_call', float('nan')):.0f} GPU kernels")
        kernel_s = (e.get("gpu_us_per_call_total") or 0) * 1e-6
        if 0 < kernel_s < e["steady_s"] and e.get("kernels_complete"):
            text += (f", which ran for {_us(kernel_s)} in all (profiled): **{1 - kernel_s / e['steady_s']:.0%}** of "
                     f"eager's step is spent outside its kernels, on the host's side of the launches.")
        elif 0 < kernel_s < e["steady_s"]:
            # a record made before kernels named after lambdas were counted: its kernel time is a lower
            # bound, so the share outside the kernels is an upper one
            text += (f", which ran for at least {_us(kernel_s)} in all (profiled; this record's profile left out "
                     f"the kernels named after lambdas): at most **{1 - kernel_s / e['steady_s']:.0%}** of eager's "
                     f"step is spent outside its kernels, on the host's side of the launches.")
        else:
            text += "; the record has no kernel time for eager, so it does not show how much of the step is outside them."
    if ro and ro.get("steady_s") and ro.get("gpu_kernels_per_call") is not None:
        kr, ke = ro["gpu_kernels_per_call"], e.get("gpu_kernels_per_call")
        more = "" if ke is None else (", as many as eager's" if kr == ke else
                                      f", {abs(kr - ke):.0f} {narrate.direction(kr - ke, 'more', 'fewer')} than eager's")
        text += (f" The CUDA graph makes {ro['launch_calls_per_call']:.0f} launch calls for {kr:.0f} GPU kernels "
                 f"(Inductor's{more}), and its whole step took {_us(ro['steady_s'])}.")
    if d and d.get("steady_s") and ro:
        kd, ke = d.get("gpu_kernels_per_call"), e.get("gpu_kernels_per_call")
        if kd is not None and ke is not None and kd > ke:
            # Inductor's graph can run more kernels than eager (its generated kernels beside the library
            # calls it keeps): say so, from the counts
            text += (f" `default` ran more GPU kernels per step than eager ({kd:.0f} against {ke:.0f}): what it "
                     f"generated did not replace eager's kernels one for one.")
        if d["steady_s"] > e["steady_s"] * (1 + narrate.SAME_WITHIN):
            fewer = kd is not None and ke is not None and kd < ke
            text += ((f" `default` alone fused the step into fewer kernels ({kd:.0f} against {ke:.0f}) and was still "
                      f"slower than eager: fusion does not shorten a step whose time is in the launches."
                      if fewer else " `default` was slower than eager.")
                     + " The record does not show what "
                     f"the extra {_us(d['steady_s'] - e['steady_s'])} is (the timing spread was "
                     f"{d.get('spread', float('nan')):.0%} for `default`, {e.get('spread', float('nan')):.0%} for eager).")
        elif d["steady_s"] < e["steady_s"] * (1 - narrate.SAME_WITHIN):
            text += (f" `default` alone, with {kd:.0f} kernels against {ke:.0f}, gained less than the CUDA graph: the "
                     f"launches, not the kernels, dominate this step.")
    return text
