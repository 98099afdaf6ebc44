"""The "what just happened" sentences of notebook 02, computed from the run's (or the record's) numbers.

Every comparison uses course_kit.narrate's wording, so "faster", "slower", "more" and "less" follow
the sign and size of the measured effect; a cause is named only where the numbers show it.
"""
from __future__ import annotations

from typing import Mapping

from .. import narrate
from .train import LAST_STEPS, final_loss

MIB = 2**20


def explain_step_speed(times_s: Mapping[str, float], device: str, device_name: str | None = None) -> str:
    """bf16 (and fp16 with the scaler) against strict fp32 in this run: faster, slower or the same.
    `device` is "cuda" or "cpu"; `device_name` names the machine in the text (e.g. "NVIDIA H200")."""
    if "fp32" not in times_s:
        raise ValueError(f"need the fp32 step time to compare against, got modes {sorted(times_s)}")
    t32 = times_s["fp32"]
    parts = []
    for m in ("tf32", "bf16", "fp16_scaler"):
        if m in times_s:
            parts.append(f"`{m}` {times_s[m] * 1e3:.1f} ms, {narrate.speed(times_s[m], t32)} strict fp32")
    where = device_name or ("GPU" if device == "cuda" else "CPU")
    text = f"On this {where}, strict fp32 ran a step in {t32 * 1e3:.1f} ms; " + "; ".join(parts) + "."
    if device != "cuda" and "tf32" in times_s:
        text += (f" On a CPU `tf32` runs exactly the code of strict fp32, so the gap between those two "
                 f"(`tf32` {narrate.speed(times_s['tf32'], t32)} strict fp32) is this run's timing noise.")
    if device != "cuda" and "bf16" in times_s and times_s["bf16"] > t32 * (1 + narrate.SAME_WITHIN):
        text += (" This run does not show why 16-bit autocast is slower here; notebook 00's roofline "
                 "measured which matmul dtypes this CPU runs natively.")
    return text


def explain_saved_bytes(saved_by_dtype: Mapping[str, Mapping[str, int]], low: str = "bf16") -> str:
    """How many bytes autocast (`low`) kept for backward against fp32, and which part stayed fp32.

    `saved_by_dtype[mode]` is `RunResult.saved_by_dtype`: bytes saved per tensor dtype."""
    for m in ("fp32", low):
        if m not in saved_by_dtype:
            raise ValueError(f"need the saved bytes of {m!r}, got modes {sorted(saved_by_dtype)}")
    full, half = saved_by_dtype["fp32"], saved_by_dtype[low]
    t_full, t_half = sum(full.values()), sum(half.values())
    if t_full <= 0:
        raise ValueError("fp32 saved no bytes: nothing to compare")
    ratio = t_half / t_full
    kept32 = half.get("float32", 0)
    sixteen = half.get("bfloat16", 0) + half.get("float16", 0)
    text = (f"For the backward pass, `{low}` autocast kept {t_half / MIB:.2f} MiB against {t_full / MIB:.2f} MiB "
            f"for fp32: **{ratio:.2f}x** the bytes ({narrate.more_or_less(t_half / MIB, t_full / MIB, 'MiB')} fp32).")
    if sixteen:
        text += (f" Of autocast's saved bytes, {sixteen / MIB:.2f} MiB are 16-bit tensors and {kept32 / MIB:.2f} MiB "
                 f"({kept32 / t_half:.0%}) stayed fp32 (tensors saved by the operations that autocast leaves in fp32).")
        if ratio > 0.55:
            text += " That fp32 part is why the ratio is not 0.5."
    return text


def step_peak_gib(rows: list[Mapping]) -> dict[str, float]:
    """Per mode, the GPU memory one training step of that mode needed: its peak minus what was already
    allocated before it started.

    Records made after the leak fix carry `base_mem_gib` (memory allocated when the peak counter was
    reset). Older records do not; there, what was still allocated after the previous mode
    (`mem_after_gib`) and the leaked forward graph of the mode's own saved-bytes probe (its
    `saved_activation_gib`) are subtracted."""
    out, left_over = {}, 0.0
    for r in rows:
        if r.get("peak_mem_gib") is None:
            continue
        if r.get("base_mem_gib") is not None:
            out[r["name"]] = r["peak_mem_gib"] - r["base_mem_gib"]
        else:
            out[r["name"]] = r["peak_mem_gib"] - left_over - (r.get("saved_activation_gib") or 0.0)
        left_over = r.get("mem_after_gib") or 0.0
    return out


def leaked(rows: list[Mapping], threshold_gib: float = 0.5) -> list[tuple[str, float]]:
    """(mode, GiB still allocated after it was freed) for each mode that left more than the threshold."""
    return [(r["name"], r["mem_after_gib"]) for r in rows
            if (r.get("mem_after_gib") or 0.0) > threshold_gib]


def explain_peak_memory(rows: list[Mapping]) -> str:
    """The record's peak memory per mode, and, where memory was left allocated between modes, the
    per-step peak once that is subtracted, compared with strict fp32."""
    rows = [r for r in rows if r.get("peak_mem_gib") is not None]
    if not rows:
        return "This record has no peak-memory figures."
    peaks = {r["name"]: r["peak_mem_gib"] for r in rows}
    step = step_peak_gib(rows)
    left = leaked(rows)
    text = "Peak GPU memory (GiB, 2^30 bytes) as recorded: " + ", ".join(f"{m} {v:.1f}" for m, v in peaks.items()) + "."
    if left:
        text += (" These peaks include memory that earlier work left allocated: after each mode was freed, "
                 + ", ".join(f"{v:.1f} GiB after {m}" for m, v in left)
                 + ". The record was made before a leak was fixed (the probe that counts the bytes saved for "
                   "backward kept one forward pass's activations alive per mode). Subtracting what was left "
                   "over and each mode's own probe, one training step needed: "
                 + ", ".join(f"{m} {v:.1f}" for m, v in step.items()) + " GiB.")
    base = step.get("fp32")
    if base and base > 0:
        cmp = [f"`{m}` {narrate.more_or_less(v, base, 'GiB')} fp32" for m, v in step.items()
               if m != "fp32" and v > 0]
        if cmp:
            text += " Per step: " + "; ".join(cmp) + "."
    return text


def explain_record(summary: Mapping, gpu: str) -> str:
    """The reference run's headline: bf16 and TF32 against strict fp32, and fp16 + scaler's skipped
    steps, as numbers with computed wording (no targets)."""
    bits = [f"On the {gpu}, with {summary['n_params'] / 1e6:.0f}M parameters and batch {summary.get('batch')} x "
            f"{summary.get('seq_len')} tokens:"]
    for m, label in (("bf16", "a bf16 autocast step"), ("tf32", "a TF32 step"), ("fp16_scaler", "fp16 with the scaler")):
        s = summary.get(f"{m}_speedup_vs_fp32")
        if s:
            bits.append(f"{label} ran **{narrate.ratio_words(s)}** strict fp32;")
    sk = summary.get("fp16_scaler_skipped_after_warmup")
    if sk is not None:
        bits.append(f"fp16 with the scaler skipped **{sk:.2%}** of its steps after the first "
                    f"{summary.get('skipped_warmup_steps')}.")
    checks = summary.get("checks") or {}
    if checks:
        same = checks.get("same_scale_history") and checks.get("same_params")
        bits.append(f"The hand-written scaler {'matched' if same else 'did NOT match'} GradScaler step for step "
                    f"on that GPU.")
    return " ".join(bits)


def breakdown_gib(row: Mapping) -> dict[str, float]:
    """A record row's `memory_breakdown`, by category, in GiB (categories that held nothing left out)."""
    mb = row.get("memory_breakdown") or {}
    return {c: b / 2**30 for c, b in (mb.get("by_category") or {}).items() if b}


def explain_memory_breakdown(rows: list[Mapping], low: str = "bf16") -> str:
    """What held one training step's peak GPU memory, per mode (from `amp.snapshot.step_memory`), and
    why `low` autocast's peak is lower or higher than strict fp32's: the weights, gradients and
    optimizer state do not change with autocast; the activations and the 16-bit weight copies do."""
    from ..profiling import memory as M
    by = {r["name"]: r["memory_breakdown"] for r in rows if r.get("memory_breakdown")}
    if not by:
        return "This record has no memory snapshot of a training step."
    g = lambda mb, c: mb["by_category"].get(c, 0) / 2**30   # noqa: E731
    lines = []
    for m, mb in by.items():
        top = max(mb["by_category"], key=mb["by_category"].get)
        lines.append(f"- `{m}`: peak **{mb['peak_bytes'] / 2**30:.2f} GiB** (during the {mb['peak_phase']} pass); "
                     f"the largest holder: {top}, {g(mb, top):.2f} GiB ({mb['by_category'][top] / mb['peak_bytes']:.0%}).")
    text = "At the peak of one steady training step, from the allocator's log:\n" + "\n".join(lines)
    if "fp32" in by and low in by:
        a, b = by["fp32"], by[low]
        fixed = lambda mb: sum(g(mb, c) for c in (M.WEIGHTS, M.GRADS, M.OPT_STATE))   # noqa: E731
        act_a, act_b, cast = g(a, M.ACTIVATIONS), g(b, M.ACTIVATIONS), g(b, M.CAST)
        text += (f"\n\n`{low}` against fp32: peak {narrate.more_or_less(b['peak_bytes'] / 2**30, a['peak_bytes'] / 2**30, 'GiB')} "
                 f"fp32. Weights, gradients and optimizer state hold {fixed(b):.2f} GiB in `{low}` and {fixed(a):.2f} GiB "
                 f"in fp32: autocast keeps them in fp32. The activations saved for backward: {act_b:.2f} GiB against "
                 f"{act_a:.2f} GiB")
        text += (f" ({act_b / act_a:.2f}x)" if act_a > 0 else "") + (
            f"; autocast's cache of 16-bit weight copies adds {cast:.2f} GiB." if cast > 0 else ".")
        if b["peak_bytes"] >= a["peak_bytes"]:
            text += (f" So `{low}` did not lower the peak here: what it saved on activations, the weight copies "
                     f"and the peak's other holders took back.")
    return text


def workload_difference(live: Mapping, recorded: Mapping) -> str:
    """What makes this run's workload differ from the record's, for notebook.headline's `why`: model
    size (parameters) and batch (rows x tokens), each named only where the two differ; "" when they
    match. Both mappings hold n_params, batch and seq_len (the record's `summary` does)."""
    for which, m in (("live", live), ("recorded", recorded)):
        missing = [k for k in ("n_params", "batch", "seq_len") if m.get(k) is None]
        if missing:
            raise ValueError(f"the {which} workload needs {missing}, got {sorted(m)}")
    size = lambda n: f"{n / 1e6:.3g}M parameters"   # noqa: E731
    shape = lambda m: f"batches of {m['batch']} x {m['seq_len']:,} tokens"   # noqa: E731
    rec, here = [], []
    if live["n_params"] != recorded["n_params"]:
        rec.append(size(recorded["n_params"]))
        here.append(size(live["n_params"]))
    if (live["batch"], live["seq_len"]) != (recorded["batch"], recorded["seq_len"]):
        rec.append(shape(recorded))
        here.append(shape(live))
    if not rec:
        return ""
    return f"the record's model has {' and '.join(rec)}, this run's {' and '.join(here)}"


def explain_final_losses(losses: Mapping[str, list[float]], last: int | None = None) -> str:
    """Each run's final loss as notebook 02 states it everywhere: the mean of its last steps."""
    last = LAST_STEPS if last is None else last
    if not losses:
        raise ValueError("no runs to state the final loss of")
    return (f"Final loss (mean of the last {last} steps): "
            + ", ".join(f"{m} {final_loss(v, last):.3f}" for m, v in losses.items()) + ".")
