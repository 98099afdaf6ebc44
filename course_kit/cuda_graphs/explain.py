"""Where the time of a decode step goes, from a `course-kit bench cuda_graphs` record itself.

Pure functions over the record's summary and rows (no GPU needed), used by the bench to write its
`explain` field and by notebook 05 to explain older records the same way. Their words (faster,
slower, about the same) come from `narrate`, so they follow the numbers; engineering targets stay in
the record's `targets`/`meets` and are never part of the text a learner reads.
"""
from __future__ import annotations

from .. import narrate

# (qkv_rope: the Triton step's q/k/v product, which also does RoPE and the K/V append in its store)
_GEMM_WORDS = ("nvjet", "gemm", "gemv", "cutlass", "xmma", "splitk", "qkv_rope")


def is_gemm(kernel: str) -> bool:
    """A matrix-multiply kernel (cuBLAS / CUTLASS names), as opposed to norms, RoPE, attention, copies."""
    k = kernel.lower()
    if any(w in k for w in ("fmha", "flash", "attention")):  # attention kernels can carry "cutlass"/"gemm"
        return False
    return any(w in k for w in _GEMM_WORDS)


def gemm_split(profile: dict) -> dict:
    """GPU µs and kernels per step in matrix multiplies vs the rest. Uses the profile's totals over all
    kernels when recorded (`gemm_us_per_step`), else the top kernels only (`complete` False)."""
    total = float(profile.get("gpu_us_per_step") or 0.0)
    if profile.get("gemm_us_per_step") is not None:
        g, n, complete = float(profile["gemm_us_per_step"]), float(profile.get("gemm_kernels_per_step") or 0), True
    else:
        top = [r for r in profile.get("top") or [] if is_gemm(r["kernel"])]
        g, n, complete = sum(r["us_per_step"] for r in top), sum(r["calls_per_step"] for r in top), False
    return {"gemm_us": g, "gemm_kernels": n, "other_us": max(total - g, 0.0),
            "other_kernels": max(float(profile.get("kernels_per_step") or 0) - n, 0.0), "complete": complete}


def _row(rows: list[dict], preset: str | None, variant: str, batch: int = 1) -> dict | None:
    for r in rows:
        if r.get("variant") == variant and r.get("batch") == batch and (preset is None or r.get("preset") == preset):
            return r
    return None


def _busy(profile: dict, wall_us: float) -> str:
    g = float(profile.get("gpu_us_per_step") or 0.0)
    if not g or not wall_us:
        return ""
    return (f"The GPU runs kernels for {g:.0f} µs of the {wall_us:.0f} µs step ({100 * g / wall_us:.0f}% busy), "
            f"in {profile.get('kernels_per_step', float('nan')):.0f} kernels. ")


def explain_reduce_overhead(summary: dict, rows: list[dict]) -> str:
    """What reduce_overhead_vs_runner means, and why it is where it is."""
    s = summary
    if "reduce_overhead_vs_runner" not in s:
        return "no reduce-overhead measurement in this record"
    preset = (s.get("decode_bytes") or {}).get("preset")
    ratio, best = s["reduce_overhead_vs_runner"], s.get("runner_variant", "runner")
    ro, g, f = (_row(rows, preset, v) for v in ("reduce_overhead", "graph", "fused_graph"))
    text = (f"reduce_overhead_vs_runner = tokens/s of torch.compile(mode=\"reduce-overhead\") / tokens/s of the "
            f"faster DecodeGraphRunner variant (`{best}`), both at batch 1: {ratio:.2f}. ")
    text += f"So reduce-overhead ran {narrate.ratio_words(ratio)} the runner. "
    if ro and g and f:
        text += (f"Per step: reduce-overhead {ro['ms_per_step']:.3f} ms, graph runner without fusion "
                 f"{g['ms_per_step']:.3f} ms (reduce-overhead {narrate.speed(ro['ms_per_step'], g['ms_per_step'])} "
                 f"it), fused runner {f['ms_per_step']:.3f} ms. ")
    pro, pf = s.get("profile_reduce_overhead_b1") or {}, s.get("profile_fused_graph_b1") or {}
    if pro.get("gpu_us_per_step") and pf.get("gpu_us_per_step") and ro and f:
        text += (f"Profiled per step: reduce-overhead {pro['kernels_per_step']:.0f} kernels, "
                 f"{pro['gpu_us_per_step']:.0f} µs of GPU time in a {ro['ms_per_step'] * 1e3:.0f} µs step; the fused "
                 f"runner {pf['kernels_per_step']:.0f} kernels, {pf['gpu_us_per_step']:.0f} µs in "
                 f"{f['ms_per_step'] * 1e3:.0f} µs. ")
        host = ro["ms_per_step"] * 1e3 - pro["gpu_us_per_step"]
        kern = pro["gpu_us_per_step"] - pf["gpu_us_per_step"]
        gap = (ro["ms_per_step"] - f["ms_per_step"]) * 1e3
        if gap > 0:
            text += (f"Of the {gap:.0f} µs gap, {max(kern, 0):.0f} µs is extra GPU kernel time (its kernels, listed "
                     f"in its profile) and {max(host - (f['ms_per_step'] * 1e3 - pf['gpu_us_per_step']), 0):.0f} µs "
                     "is more time the GPU sits idle, between kernels or waiting on the host (for reduce-overhead: "
                     "Dynamo's guards and CUDA graph trees' per-call bookkeeping before each replay).")
    elif pf.get("gpu_us_per_step") and f:
        text += ("This record has no profile of the reduce-overhead step (later runs record "
                 "`profile_reduce_overhead_b1`). " + _busy(pf, f["ms_per_step"] * 1e3).replace(
                     "The GPU", "For the fused runner, the GPU"))
    return text.strip()


# The llama-1b forms in the order the bench builds them, each one change from the one before.
BIG_FORM_WORDS = {"graph": "the model's own step in a CUDA graph", "fused_graph": "Inductor-fused blocks",
                  "triton_graph": "the course's Triton kernels (decode_kernels)",
                  "triton_graph_pdl": "the same kernels with programmatic dependent launch"}
# Under programmatic dependent launch a kernel starts before the previous one ends and its profiled
# time includes that wait, so kernel times overlap; the same kernels launched one after another
# are profiled instead to say where the time goes.
SERIAL_FORM = {"triton_graph_pdl": "triton_graph"}


def serial_profile(summary: dict) -> tuple[str | None, dict]:
    """(form, profile) to break the fastest llama-1b form down by kernel: its own profile, or, if its
    kernels overlap (PDL), that of the same kernels launched one after another."""
    best = summary.get("hbm_variant")
    profiles = summary.get("big_profiles") or {}
    form = SERIAL_FORM.get(best, best)
    if form in profiles:
        return form, profiles[form]
    return best, summary.get("profile_big_b1") or {}


def _kernel_groups(profile: dict) -> dict[str, float]:
    """GPU µs per step by kind of kernel of the Triton step, from the profile's top kernels."""
    groups: dict[str, float] = {}
    for r in profile.get("top") or []:
        k = r["kernel"].lower()
        kind = ("matrix-vector products" if is_gemm(k) else "attention" if ("decode" in k or "merge" in k)
                else "RoPE and the K/V append" if "rope" in k else "argmax" if "argmax" in k
                else "embedding, copies and small ops")
        groups[kind] = groups.get(kind, 0.0) + r["us_per_step"]
    return groups


def forms_table(summary: dict, rows: list[dict]) -> list[dict]:
    """One row per llama-1b form, in the bench's order: ms per token, kernels and GPU-busy µs per step
    (busy µs only where kernels do not overlap: under PDL a kernel's time includes its wait), GB/s
    read and its share of the run's copy bandwidth."""
    profiles, copy = summary.get("big_profiles") or {}, summary.get("copy_gbs")
    table = []
    for name, words in BIG_FORM_WORDS.items():
        r = next((r for r in rows if r.get("preset") == "llama-1b" and r.get("variant") == name
                  and r.get("batch") == 1), None)
        if r is None:
            continue
        prof = profiles.get(name) or {}
        table.append({"form": words, "ms_per_token": r["ms_per_step"], "kernels": prof.get("kernels_per_step"),
                      "gpu_busy_us": None if name in SERIAL_FORM else prof.get("gpu_us_per_step"),
                      "gbs": r.get("gbs"), "of_copy": r["gbs"] / copy if r.get("gbs") and copy else None})
    return table


def explain_kernels(summary: dict, rows: list[dict]) -> str:
    """The llama-1b step, one change at a time, against the time its bytes take at the copy rate.
    Where the fastest form's time goes, kernel by kernel, is `explain_hbm`'s to say."""
    s = summary
    forms = [r for name in BIG_FORM_WORDS for r in rows
             if r.get("preset") == "llama-1b" and r.get("variant") == name and r.get("batch") == 1]
    if not forms:
        return "no llama-1b decode forms in this record"
    profiles = s.get("big_profiles") or {}
    parts = []
    for i, r in enumerate(forms):
        kernels = (profiles.get(r["variant"]) or {}).get("kernels_per_step")
        said = f"{BIG_FORM_WORDS[r['variant']]}: {r['ms_per_step']:.3f} ms per token"
        if kernels:
            said += f" in {kernels:.0f} kernels"
        if i:
            said += f", {narrate.speed(r['ms_per_step'], forms[i - 1]['ms_per_step'])} the form before"
        parts.append(said)
    text = "llama-1b at batch 1, one change at a time, in one run: " + "; ".join(parts) + ". "
    best = min(forms, key=lambda r: r["ms_per_step"])
    nbytes, copy = float(best.get("bytes_per_token") or 0), float(s.get("copy_gbs") or 0)
    if nbytes and copy:
        floor_us = nbytes / copy / 1e3
        text += (f"Reading its {nbytes / 1e9:.2f} GB once at the copy bandwidth of this run would take {floor_us:.0f} µs; "
                 f"the fastest form takes {best['ms_per_step'] * 1e3:.0f} µs, {floor_us / (best['ms_per_step'] * 1e3):.0%} "
                 "of that pace. ")
    serial = next((r for r in forms if r["variant"] == SERIAL_FORM.get(best["variant"])), None)
    if serial:
        saved = (serial["ms_per_step"] - best["ms_per_step"]) * 1e3
        text += (f"Launching the same kernels with PDL changed the step by {-saved:+.0f} µs: each kernel starts, and "
                 "reads its first weights, while the one before it finishes. ")
    return text.strip()


def explain_hbm(summary: dict, rows: list[dict]) -> str:
    """Why the llama-1b batch-1 step reads its bytes at `hbm_fraction` of the copy bandwidth."""
    s = summary
    if "hbm_fraction" not in s:
        return "no llama-1b bandwidth measurement in this record"
    variant = s.get("hbm_variant")
    row = next((r for r in rows if r.get("variant") == variant and r.get("bytes_per_token")
                and r.get("batch") == 1), None)
    wall = s["big_ms_per_token"] * 1e3
    text = (f"llama-1b at batch 1 (`{variant}`): {s['hbm_gbs']:,.0f} GB/s of weights and K/V read per token, "
            f"{s['hbm_fraction']:.0%} of the {s['copy_gbs']:,.0f} GB/s copy bandwidth measured in the same run. ")
    form, prof = serial_profile(s)
    if not prof.get("gpu_us_per_step") or not row:
        return (text + "No profile recorded.").strip()
    g = float(prof["gpu_us_per_step"])
    nbytes = float(row["bytes_per_token"])
    if form != variant:   # PDL overlaps kernels: break down the same kernels run one after another
        serial = next((r for r in rows if r.get("variant") == form and r.get("batch") == 1
                       and r.get("bytes_per_token")), None)
        wall = serial["ms_per_step"] * 1e3 if serial else wall
        text += f"Profiled without PDL (`{form}`, a {wall:.0f} µs step), so that kernel times do not overlap. "
    text += _busy(prof, wall)
    if form != variant:
        text += (f"Run one after another, the kernels alone take {g:.0f} µs ({nbytes / g / 1e3:,.0f} GB/s, "
                 f"{nbytes / g / 1e3 / s['copy_gbs']:.0%} of copy); the PDL step, {s['big_ms_per_token'] * 1e3:.0f} µs, "
                 f"is {narrate.speed(s['big_ms_per_token'] * 1e3, g)} that sum, because each kernel's start and "
                 "tail overlap its neighbours'. ")
    else:
        text += (f"So launch gaps are not the limit: even with none, the kernels move {nbytes / 1e9:.2f} GB in "
                 f"{g:.0f} µs, {nbytes / g / 1e3:,.0f} GB/s ({nbytes / g / 1e3 / s['copy_gbs']:.0%} of copy). ")
    sp = gemm_split(prof)
    if sp["gemm_us"] > 0:
        scope = "" if sp["complete"] else " (from the top kernels only)"
        text += (f"Matrix multiplies{scope}: {sp['gemm_kernels']:.0f} kernels, {sp['gemm_us']:.0f} µs, reading nearly all "
                 f"the bytes at about {nbytes / sp['gemm_us'] / 1e3:,.0f} GB/s "
                 f"({nbytes / sp['gemm_us'] / 1e3 / s['copy_gbs']:.0%} of copy)")
        text += (": batch-1 matrix-vector products on matrices of a few to a few tens of MB do not reach the copy "
                 "kernel's bandwidth. " if nbytes / sp["gemm_us"] / 1e3 < 0.9 * s["copy_gbs"] else ". ")
        kinds = "norms, RoPE, attention, residual adds, argmax"
        if form in SERIAL_FORM.values():   # the Triton step: norms and adds ride inside the products
            kinds = ", ".join(f"{kind} {us:.0f} µs" for kind, us in _kernel_groups(prof).items()
                              if kind != "matrix-vector products")
        if sp["complete"]:
            text += (f"The other {sp['other_kernels']:.0f} kernels ({kinds}) take "
                     f"{sp['other_us']:.0f} µs ({100 * sp['other_us'] / wall:.0f}% of the step) while moving few "
                     "bytes. ")
        else:
            text += (f"Everything else ({kinds}: about "
                     f"{float(prof.get('kernels_per_step') or 0) - sp['gemm_kernels']:.0f} kernels) takes about "
                     f"{sp['other_us']:.0f} µs ({100 * sp['other_us'] / wall:.0f}% of the step) while moving few bytes. ")
        if form == variant:   # (under PDL the step already overlaps what this sum adds up)
            text += (f"With those at zero cost and the matmuls as measured, the step would reach "
                     f"{nbytes / sp['gemm_us'] / 1e3 / s['copy_gbs']:.0%} of copy bandwidth.")
    return text.strip()


def explain_reduce_overhead_live(live_ro_ms: float, live_graph_ms: float,
                                 record_ro_ms: float | None = None, record_graph_ms: float | None = None,
                                 gpu: str = "the reference GPU") -> str:
    """Notebook 05, section 4: this run's reduce-overhead step against this run's (unfused) graph
    runner, then the record's pair, each labelled; like is compared with like, never a live time with
    a recorded one as if they were one measurement (issue 19 item 5)."""
    for name, v in (("live_ro_ms", live_ro_ms), ("live_graph_ms", live_graph_ms)):
        if not isinstance(v, (int, float)) or not v > 0:
            raise ValueError(f"{name}={v!r}; a step time must be a number > 0 (milliseconds)")
    text = (f"This run (live), batch 1: reduce-overhead {live_ro_ms:.3f} ms per step, the graph runner without "
            f"fusion {live_graph_ms:.3f} ms: reduce-overhead ran {narrate.speed(live_ro_ms, live_graph_ms)} it.")
    if record_ro_ms and record_graph_ms:
        text += (f" Recorded on {gpu}, batch 1, same pair: reduce-overhead {record_ro_ms:.3f} ms, graph runner "
                 f"without fusion {record_graph_ms:.3f} ms: reduce-overhead ran "
                 f"{narrate.speed(record_ro_ms, record_graph_ms)} it.")
        words = narrate.speed(live_ro_ms, record_ro_ms)
        if not words.startswith("about"):
            text += (f" This run's reduce-overhead step ran {words} the recorded one. The two were measured "
                     "with different set-ups (the benchmark's KV cache and decode position are not this "
                     "cell's), and neither run records which difference accounts for it.")
    return text


def graph_leads(rows: list[dict], preset: str | None = None) -> dict[int, float]:
    """Graph over eager (eager ms per step / graph ms per step) at each batch both were timed at."""
    leads = {}
    for b in sorted({r["batch"] for r in rows if r.get("variant") == "eager" and r.get("batch")}):
        eager, graph = _row(rows, preset, "eager", b), _row(rows, preset, "graph", b)
        if eager and graph and eager.get("ms_per_step") and graph.get("ms_per_step"):
            leads[b] = eager["ms_per_step"] / graph["ms_per_step"]
    return leads


LAUNCH_RATIO_CLOSE = 0.15   # a lead within 15% of the launch ratio is "about the same as" it


def explain_graph_lead(rows: list[dict], launch_ratio: float | None = None, where: str = "This run",
                       preset: str | None = None) -> str:
    """Notebook 05, section 3: how the graph's lead over the eager step moves from the smallest to the
    largest batch (grows, shrinks or holds, from the two ratios), and how the batch-1 lead compares
    with the launch ratio of section 1 (a bare kernel's eager launch over its replayed one)."""
    leads = graph_leads(rows, preset)
    if not leads:
        return f"{where}: no graph step was timed beside the eager one (replaying a graph needs a CUDA GPU)."
    lo, hi = min(leads), max(leads)
    text = f"{where}: the graph step ran {narrate.ratio_words(leads[lo])} the eager step at batch {lo}"
    if hi != lo:
        trend = narrate.direction(leads[hi] / leads[lo] - 1.0, "grows", "shrinks", "holds about level",
                                  tolerance=narrate.SAME_WITHIN)
        text += (f" and {narrate.ratio_words(leads[hi])} it at batch {hi}: from batch {lo} to batch {hi} the "
                 f"graph's lead {trend} ({leads[lo]:.2f}x → {leads[hi]:.2f}x)")
    if launch_ratio:
        words = narrate.ratio_words(leads[lo] / launch_ratio, LAUNCH_RATIO_CLOSE, better="larger",
                                    worse="smaller", same="about the same as")
        text += (f". At batch {lo} that lead, {leads[lo]:.2f}x, is {words} the launch ratio of section 1 "
                 f"({launch_ratio:.2f}x)")
    return text + "."


# What each recorded profile is a profile of: (preset, the row variant of its step); None: the
# fastest llama-1b form (`hbm_variant`).
PROFILED_STEPS = {"profile_eager_b1": ("decode", "eager"), "profile_fused_graph_b1": ("decode", "fused_graph"),
                  "profile_triton_graph_b1": ("decode", "triton_graph"),
                  "profile_reduce_overhead_b1": ("decode", "reduce_overhead"), "profile_big_b1": ("llama-1b", None)}


def describe_profile(key: str, summary: dict, rows: list[dict]) -> str:
    """One recorded profile's heading: which step it profiled (model, form, batch 1), its kernels and
    kernel time per step beside the timed step, and, where the kernel time exceeds the step, why:
    under PDL each kernel's profiled time includes its wait for the one before, so the times overlap."""
    if key not in PROFILED_STEPS:
        raise ValueError(f"key={key!r}; choose one of {sorted(PROFILED_STEPS)}")
    prof = summary.get(key) or {}
    preset, variant = PROFILED_STEPS[key]
    preset = (summary.get("decode_bytes") or {}).get("preset") if preset == "decode" else preset
    variant = variant or summary.get("hbm_variant")
    row = _row(rows, preset, variant) if variant else None
    text = (f"`{key}` ({preset}, `{variant}`, batch 1): **{prof.get('kernels_per_step', float('nan')):.0f}** "
            f"kernels per step, **{prof.get('gpu_us_per_step', float('nan')):.0f} µs** of kernel time per step")
    if not (row and row.get("ms_per_step") and prof.get("gpu_us_per_step")):
        return text + "."
    step_us, busy_us = row["ms_per_step"] * 1e3, prof["gpu_us_per_step"]
    if busy_us <= step_us:
        return text + f" in a {step_us:.0f} µs step ({busy_us / step_us:.0%} busy)."
    text += f", {narrate.more_or_less(busy_us, step_us, 'µs')} the {step_us:.0f} µs step itself"
    if variant in SERIAL_FORM:
        text += (": this form launches with programmatic dependent launch, so a kernel starts before the one "
                 "before it ends and its profiled time includes that wait; the kernels' times overlap, and "
                 f"their sum is no step time (`{SERIAL_FORM[variant]}`, the same kernels without PDL, says where "
                 "the time goes).")
    else:
        text += ": the profile and the timing are separate passes, and this record does not say why they differ."
    return text
