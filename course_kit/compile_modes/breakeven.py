"""When does compiling pay? Compile time against the time saved per call, and the sentences of
notebook 03 that compare modes (computed from the run's or the record's numbers, never typed).

- `break_even_calls`: the number of calls after which a compiled mode has saved its compile time.
- `total_time`: wall time of N calls in a mode, compile included (the break-even widget's curves).
- `explain_breakeven`, `explain_chain`, `explain_decode`: "what just happened" for sections 3 and 6.
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


def explain_chain(rows: Mapping[str, Mapping], input_bytes: int | None = None,
                  copy_gbs: float | None = None) -> str:
    """Section 3: each mode on the elementwise chain against eager and against `default`. Where
    `reduce-overhead` is slower than `default`, its copy of the inputs into the CUDA graph's own
    buffers is named: measured when a static-input run is among the rows, else estimated from the
    inputs' bytes and a copy bandwidth (and labelled an estimate)."""
    if "eager" not in rows or "default" not in rows:
        raise ValueError(f"need eager and default rows, got {sorted(rows)}")
    e, d = rows["eager"], rows["default"]
    n = break_even_calls(d.get("compile_s") or 0.0, d["steady_s"], e["steady_s"])
    text = (f"Eager: {_us(e['steady_s'])} per call. `default`: {_us(d['steady_s'])}, "
            f"{narrate.speed(d['steady_s'], e['steady_s'])} eager, after a first call of {d['first_call_s']:.2f} s; "
            + ("compiling pays for itself " + _calls(n) + "." if not math.isinf(n)
               else "each compiled call is not faster, so compiling never pays for itself at this size."))
    for m, r in rows.items():
        if m in ("eager", "default") or not r.get("steady_s"):
            continue
        text += (f"\n- `{m}`: {_us(r['steady_s'])}, {narrate.speed(r['steady_s'], e['steady_s'])} eager and "
                 f"{narrate.speed(r['steady_s'], d['steady_s'])} `default`; compile {r.get('compile_s') or 0.0:.1f} s.")
        slower = r["steady_s"] > d["steady_s"] * (1 + narrate.SAME_WITHIN)
        if m == "reduce-overhead" and slower:
            static = rows.get("reduce-overhead (static inputs)")
            gap = r["steady_s"] - d["steady_s"]
            if static and static.get("steady_s"):
                saved = r["steady_s"] - static["steady_s"]
                text += (f" With its inputs marked as static addresses (`torch._dynamo.mark_static_address`), "
                         f"the same mode ran {_us(static['steady_s'])}, "
                         f"{narrate.speed(static['steady_s'], d['steady_s'])} `default`")
                if saved <= narrate.SAME_WITHIN * r["steady_s"]:
                    # the static run is as slow: the copy is not the cause, and this run shows no other
                    text += (": marking the inputs static did not close the gap, so copying them into the CUDA "
                             f"graph's own buffers is not what costs the {_us(gap)}; this run does not show what does.")
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


def explain_decode(rows: Mapping[str, Mapping], gpu: str) -> str:
    """Section 6: the batch-1 decode step per mode against eager, and what the record shows about
    where eager's time goes: a CUDA graph replays about the same GPU kernels, so its whole step bounds
    the GPU's kernel time, and the rest of eager's step is outside the kernels."""
    if "eager" not in rows:
        raise ValueError(f"need the eager row, got {sorted(rows)}")
    e = rows["eager"]
    text = f"On the {gpu}, the batch-1 decode step: eager {_us(e['steady_s'])}"
    for m, r in rows.items():
        if m != "eager" and r.get("steady_s"):
            text += f"; `{m}` {_us(r['steady_s'])}, **{narrate.speed(r['steady_s'], e['steady_s'])}** eager"
    text += "."
    ro, d = rows.get("reduce-overhead"), rows.get("default")
    if ro and ro.get("steady_s") and e.get("launch_calls_per_call"):
        share = 1 - ro["steady_s"] / e["steady_s"]
        text += (f" Eager launches {e['launch_calls_per_call']:.0f} kernels from the host per step; the CUDA graph "
                 f"makes {ro['launch_calls_per_call']:.0f} launch calls for {ro['gpu_kernels_per_call']:.0f} GPU kernels, "
                 f"and its whole step took {_us(ro['steady_s'])}. The GPU's kernels therefore need at most that long, "
                 f"so at least {share:.0%} of eager's step is spent outside them, on the host's side of the launches.")
    if d and d.get("steady_s") and ro:
        if d["steady_s"] > e["steady_s"] * (1 + narrate.SAME_WITHIN):
            text += (f" `default` alone fused the step into fewer kernels ({d.get('gpu_kernels_per_call', float('nan')):.0f} "
                     f"against {e.get('gpu_kernels_per_call', float('nan')):.0f}) and was still slower than eager: "
                     f"fusion does not shorten a step whose time is in the launches. The record does not show what "
                     f"the extra {_us(d['steady_s'] - e['steady_s'])} is (the timing spread was "
                     f"{d.get('spread', float('nan')):.0%} for `default`, {e.get('spread', float('nan')):.0%} for eager).")
        elif d["steady_s"] < e["steady_s"] * (1 - narrate.SAME_WITHIN):
            text += (f" `default` alone, with {d.get('gpu_kernels_per_call', float('nan')):.0f} kernels against "
                     f"{e.get('gpu_kernels_per_call', float('nan')):.0f}, gained less than the CUDA graph: the launches, "
                     f"not the kernels, dominate this step.")
    return text
