"""Where the time of a decode step goes, from a `course-kit bench cuda_graphs` record itself.

Pure functions over the record's summary and rows (no GPU needed), used by the bench to write its
`explain` field and by notebook 05 to explain older records the same way. Their words (faster,
slower, about the same) come from `narrate`, so they follow the numbers; engineering targets stay in
the record's `targets`/`meets` and are never part of the text a learner reads.
"""
from __future__ import annotations

from . import narrate

_GEMM_WORDS = ("nvjet", "gemm", "gemv", "cutlass", "xmma", "splitk")


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
    prof = s.get("profile_big_b1") or {}
    if not prof.get("gpu_us_per_step") or not row:
        return (text + "No profile recorded.").strip()
    g = float(prof["gpu_us_per_step"])
    nbytes = float(row["bytes_per_token"])
    text += _busy(prof, wall)
    text += (f"So launch gaps are not the limit: even with none, the kernels move {nbytes / 1e9:.2f} GB in {g:.0f} µs, "
             f"{nbytes / g / 1e3:,.0f} GB/s ({nbytes / g / 1e3 / s['copy_gbs']:.0%} of copy). ")
    sp = gemm_split(prof)
    if sp["gemm_us"] > 0:
        scope = "" if sp["complete"] else " (from the top kernels only)"
        text += (f"Matrix multiplies{scope}: {sp['gemm_kernels']:.0f} kernels, {sp['gemm_us']:.0f} µs, reading nearly all "
                 f"the bytes at about {nbytes / sp['gemm_us'] / 1e3:,.0f} GB/s "
                 f"({nbytes / sp['gemm_us'] / 1e3 / s['copy_gbs']:.0%} of copy): batch-1 matrix-vector products on "
                 "matrices of a few to a few tens of MB do not reach the copy kernel's bandwidth. ")
        if sp["complete"]:
            text += (f"The other {sp['other_kernels']:.0f} kernels (norms, RoPE, attention, residual adds, argmax) take "
                     f"{sp['other_us']:.0f} µs ({100 * sp['other_us'] / wall:.0f}% of the step) while moving few "
                     "bytes. ")
        else:
            text += (f"Everything else (norms, RoPE, attention, adds, argmax: about "
                     f"{float(prof.get('kernels_per_step') or 0) - sp['gemm_kernels']:.0f} kernels) takes about "
                     f"{sp['other_us']:.0f} µs ({100 * sp['other_us'] / wall:.0f}% of the step) while moving few bytes. ")
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
