"""Notebook 08's "what just happened": every comparison worded from the numbers it talks about.

Each function takes numbers measured in the run (or read from a record) and returns Markdown whose
direction ("faster", "less memory", "right of the ridge", "memory-bound") follows their sign and
size, and which names a cause only where the numbers show it. Tested both ways and at the edges in
tests/test_attention_io.py. The shared phrases come from course_kit.narrate.
"""
from __future__ import annotations

import math
from typing import Mapping, Sequence

from .. import narrate

MOST = 0.5      # a share of the measured time above this "is most of" it


def _pos(**values: float) -> None:
    for name, v in values.items():
        if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise ValueError(f"{name} must be a finite number > 0; got {v!r}")


def times_more_or_less(a: float, b: float, noun: str = "", same_within: float = narrate.SAME_WITHIN,
                       less: str = "less") -> str:
    """'4.2x less {noun} than' / '1.3x more {noun} than' / 'about the same {noun} as' for a against b
    (`less="fewer"` for counted nouns)."""
    _pos(a=a, b=b)
    noun = f" {noun}" if noun else ""
    ratio = a / b
    if abs(ratio - 1.0) <= same_within:
        return f"about the same{noun} as"
    return f"{ratio:.3g}x more{noun} than" if ratio > 1 else f"{1 / ratio:.3g}x {less}{noun} than"


def explain_naive_growth(first: Mapping, last: Mapping) -> str:
    """Section 1: how naive attention's measured peak grew with S, against the square law.

    first/last: {"seq_len", "peak_MiB", "scores_MiB"} at the shortest and longest S.
    """
    _pos(s0=first["seq_len"], s1=last["seq_len"], p0=first["peak_MiB"], p1=last["peak_MiB"])
    longer = last["seq_len"] / first["seq_len"]
    growth = last["peak_MiB"] / first["peak_MiB"]
    square = longer ** 2
    if abs(growth / square - 1) <= 0.1:
        verdict = "as the square law predicts"
    elif growth < square:
        verdict = (f"less than the square law's {square:.0f}x: part of the peak (Q, K, V, the output) grows only "
                   f"linearly with S, and weighs more at short S")
    else:
        verdict = f"more than the square law's {square:.0f}x; this run does not show why"
    tensors = last["peak_MiB"] / last["scores_MiB"]
    return (f"From S = {first['seq_len']} to S = {last['seq_len']} ({longer:.0f}x longer), naive attention's peak "
            f"memory grew **{growth:.1f}x**, {verdict}. At S = {last['seq_len']} the peak holds **{tensors:.1f}** "
            f"S x S score tensors' worth of bytes.")


def explain_tiled_memory(tiled_bytes: float, naive_bytes: float, seq_len: int) -> str:
    """Section 3: tiled against naive peak memory at one S (bytes, shown in GiB)."""
    _pos(tiled_bytes=tiled_bytes, naive_bytes=naive_bytes)
    words = times_more_or_less(tiled_bytes, naive_bytes, "memory")
    tail = " The S x S matrices are never allocated." if tiled_bytes < naive_bytes else ""
    return (f"Peak memory at S = {seq_len}: tiled **{narrate.gib(tiled_bytes):.3g} GiB**, {words} naive "
            f"(**{narrate.gib(naive_bytes):.3g} GiB**; GiB = 2³⁰ bytes).{tail}")


def explain_io_counts(n: int, d: int, standard: float, flash: float, sram_bytes: int, sram_elements: int,
                      kernel: float | None = None, causal: bool = True) -> str:
    """Section 3b: the exact HBM access counts of Theorem 2's two algorithms at the learner's shape."""
    _pos(standard=standard, flash=flash, sram_bytes=sram_bytes)
    text = (f"For one head at N = {n}, d = {d}, with M = {sram_elements:,} elements of SRAM "
            f"({sram_bytes / 1024:,.0f} KiB): standard attention makes **{standard:,.0f}** HBM accesses, "
            f"FlashAttention's Algorithm 1 **{flash:,.0f}**, {times_more_or_less(flash, standard, 'accesses', less='fewer')} "
            f"standard.")
    if kernel:
        how = "Q read once, K and V once per query block" + (", tiles above the diagonal skipped" if causal else "")
        text += (f" The course's kernel ({how}) "
                 f"makes **{kernel:,.0f}**, {times_more_or_less(kernel, standard, 'accesses', less='fewer')} standard.")
    return text


def explain_theta(n: int, d: int, sram_elements: int) -> str:
    """Theorem 2's scales at this shape, their ratio M/(Nd) + M/d² and where it levels off; says when
    M lies outside the theorem's range d <= M <= Nd (then Q, K and V fit on chip whole)."""
    from .io_complexity import flash_ratio_limit, theta_flash, theta_ratio, theta_ratio_limit, theta_standard
    m = sram_elements
    text = (f"The Theorem's scales: Nd + N² = {theta_standard(n, d):,.0f} and N²d²/M = {theta_flash(n, d, m):,.0f}; "
            f"their ratio M/(Nd) + M/d² = {theta_ratio(n, d, m):.2f} falls toward M/d² = "
            f"{theta_ratio_limit(d, m):.2f} as N grows, and the exact counts' ratio (no mask) levels off at "
            f"{flash_ratio_limit(d, m):.2f}.")
    if m > n * d:
        text += (f" Here M is larger than Nd = {n * d:,}, outside the theorem's range d ≤ M ≤ Nd: Q, K and V "
                 f"fit on chip whole, so these scales describe longer sequences than this one.")
    elif m < d:
        text += f" Here M is smaller than d = {d}, outside the theorem's range d ≤ M ≤ Nd."
    return text


def io_shares(bytes_moved: float, seconds: float, flops: float, bandwidth_gbs: float,
              peak_tflops: float | None) -> tuple[float, float | None]:
    """(share of the measured time that moving `bytes_moved` at the bandwidth takes, same for the FLOPs at peak)."""
    _pos(bytes_moved=bytes_moved, seconds=seconds, flops=flops, bandwidth_gbs=bandwidth_gbs)
    mem = bytes_moved / (bandwidth_gbs * 1e9) / seconds
    comp = flops / (peak_tflops * 1e12) / seconds if peak_tflops else None
    return mem, comp


def explain_io_row(name: str, bytes_moved: float, seconds: float, flops: float, bandwidth_gbs: float,
                   peak_tflops: float | None, uncounted: str = "") -> str:
    """One variant's counted HBM bytes and FLOPs held against its measured time.

    Names memory as the bound when moving the counted bytes at the measured bandwidth takes most of
    the time and the FLOPs at the measured peak do not, arithmetic in the opposite case, and says
    the run cannot tell when both would (they overlap on a GPU) or when neither does (then
    `uncounted`, what the count leaves out, is named as not counted, not as the cause). A count that
    needs more than the measured time overstates the traffic that reached memory; a FLOP share
    above 1 means the measured matmul rate was no ceiling in this run, and it is left out.
    """
    mem, comp = io_shares(bytes_moved, seconds, flops, bandwidth_gbs, peak_tflops)
    t_ms = seconds * 1e3
    head = (f"**{name}**: {narrate.gib(bytes_moved):.3g} GiB counted; at {bandwidth_gbs:,.0f} GB/s that takes "
            f"{mem * t_ms:.3g} ms of its measured {t_ms:.3g} ms ({mem:.0%})")
    note = ""
    if comp is not None and comp > 1.0:
        note = (f"; its FLOPs ran faster than the {peak_tflops:,.3g} TFLOP/s measured for a matmul, so that "
                f"rate was no ceiling in this run and is left out")
        comp = None
    elif comp is not None:
        note = f"; its FLOPs at the {peak_tflops:,.3g} TFLOP/s measured peak take {comp:.0%}"
    head += note
    if mem > 1.0:
        return (head + ": it ran faster than its counted bytes allow at that bandwidth, so the count overstates "
                "the traffic that reached memory here (caches served some of it).")
    if mem >= MOST and comp is not None and comp >= MOST:
        return (head + ": each alone would take most of its time, and a GPU overlaps loads with math, so this "
                "run cannot tell which bounds it (the count, which knows only SRAM and HBM, is an upper bound "
                "on HBM traffic: the L2 cache can serve repeated K and V reads).")
    if mem >= MOST:
        return head + ": moving memory is most of its time (memory-bound)."
    if comp is not None and comp >= MOST:
        return head + ": arithmetic is most of its time (compute-bound), not memory traffic."
    tail = f" Not counted: {uncounted}." if uncounted else ""
    return head + ": the count explains only a small part of its time; this run does not show what the rest is." + tail


def explain_ratios(summary: Mapping) -> str:
    """The recorded Triton kernel against SDPA's flash and cuDNN backends, worded from the ratios."""
    best = summary.get("triton_variant")
    tflops = summary.get("triton_tflops")
    if not best or not tflops:
        return "The record has no Triton timing at the acceptance shape."
    parts = [f"At the acceptance shape the Triton kernel (**{best}**) reached **{tflops:.0f} TFLOP/s**"]
    for key, peer in (("triton_over_flash", "the SDPA flash backend (FlashAttention-2)"),
                      ("triton_over_cudnn", "the cuDNN backend"), ("triton_over_xformers", "xFormers")):
        ratio = summary.get(key)
        if ratio:
            parts.append(f"{narrate.ratio_words(ratio)} {peer}")
    return ", ".join(parts) + "."


def explain_fastest(tflops: Mapping[str, float | None], where: str = "here",
                    record_tflops: Mapping[str, float | None] | None = None, record_name: str = "the record") -> str:
    """Section 6: which variant reached the most TFLOP/s here, and naive against it. With the
    record of the same GPU (`record_tflops`, same shape), a record that ranks another variant first
    is said here, with both runs' figures for the two leaders: the two cells then never leave a
    reader with two winners and no word on why (the H200 copy of 2026-12-01 did)."""
    at = {k: v for k, v in tflops.items() if v}
    if not at:
        return f"No variant was timed {where}."
    fastest = max(at, key=at.get)
    text = f"The highest rate {where} is **{fastest}** at **{at[fastest]:.3g} TFLOP/s**"
    if "naive" in at and fastest != "naive":
        text += f"; naive reached {at['naive']:.3g}, {narrate.rate(at['naive'], at[fastest])} {fastest}"
    text += "."
    rec = {k: v for k, v in (record_tflops or {}).items() if v}
    if rec:
        leader = max(rec, key=rec.get)
        if leader != fastest and leader in at and fastest in rec:
            text += (f" {record_name[:1].upper() + record_name[1:]}, a separate run at this shape, ranks **{leader}** first instead "
                     f"({rec[leader]:.3g} against {rec[fastest]:.3g} TFLOP/s for {fastest}; here {at[leader]:.3g} "
                     f"against {at[fastest]:.3g}): between runs these two trade places.")
    return text


def explain_backward(tflops: Mapping[str, float]) -> str:
    """Forward + backward TFLOP/s per variant, the Triton backward worded against SDPA flash."""
    if not tflops:
        return "No forward + backward timings."
    text = "Forward + backward at the acceptance shape (FLOPs: 3.5x the forward's): " + "; ".join(
        f"**{name}** {v:.0f} TFLOP/s" for name, v in tflops.items()) + "."
    t, f = tflops.get("triton fwd+bwd"), tflops.get("sdpa flash fwd+bwd")
    if t and f:
        text += f" The course's Triton forward and backward together run {narrate.rate(t, f)} FlashAttention-2's."
    c = tflops.get("sdpa cudnn fwd+bwd")
    if t and c:
        text += f" cuDNN's run {narrate.rate(c, t)} the course's."
    return text


def explain_sweep(summary: Mapping, host_bound_at: float = 1.5) -> str:
    """The best Triton variant against SDPA flash across the sweep: in GPU time (CUDA graph
    replays) and per call, and, where a call loses, whether the host's launch set its pace (a call
    taking `host_bound_at` times or more its GPU time)."""
    rows = summary.get("sweep_over_flash") or []
    if not rows:
        return "The record has no sweep of Triton against SDPA flash."

    def shape(r: Mapping) -> str:
        return f"S = {r['seq_len']}, D = {r['head_dim']}, {'causal' if r['causal'] else 'not causal'}"
    parts = []
    graphs = [r for r in rows if r.get("graph")]
    if graphs:
        low = min(graphs, key=lambda r: r["graph"])
        behind = [r for r in graphs if r["graph"] < 1 - narrate.SAME_WITHIN]
        verdict = (f"slower than SDPA flash at {len(behind)} of {len(graphs)} shapes" if behind else
                   f"never slower than SDPA flash at any of the {len(graphs)} shapes")
        parts.append(f"In GPU time (CUDA graph replays, no host in the loop) the Triton kernel was {verdict} "
                     f"of the sweep; its lowest ratio is at {shape(low)}, where it runs "
                     f"{narrate.ratio_words(low['graph'])} flash")
    behind = [r for r in rows if r["per_call"] < 1 - narrate.SAME_WITHIN]
    if not behind:
        parts.append(f"per call, host launch included, it was never slower than flash either ({len(rows)} shapes)")
    else:
        named = []
        for r in sorted(behind, key=lambda r: (r["seq_len"], r["head_dim"])):
            words = f"{shape(r)}: {narrate.ratio_words(r['per_call'])} flash"
            call_over_gpu = r.get("call_over_graph")
            if call_over_gpu and call_over_gpu >= host_bound_at:
                words += (f", a call taking {call_over_gpu:.1f}x its GPU time, so the host's launch, "
                          "not the kernel, set the pace")
            named.append(words)
        parts.append(f"per call, host launch included, it was slower than flash at {len(behind)} of "
                     f"{len(rows)} shapes ({'; '.join(named)})")
    text = "; ".join(parts) + "."
    return text[0].upper() + text[1:]


def explain_roofline(points: Sequence[Mapping], ridge: float) -> str:
    """Each kernel's intensity against the ridge point (FLOP/byte): which side of it, by how much.

    Kernels with the same counted bytes share one intensity, so they are named together.
    """
    _pos(ridge=ridge)
    if not points:
        return "No kernel to place on the roofline."
    groups: dict[float, list[str]] = {}
    for p in points:
        groups.setdefault(float(f"{p['intensity']:.3g}"), []).append(f"**{p['name']}**")
    parts = []
    for value, names in sorted(groups.items(), reverse=True):
        side = ("right of the ridge (the compute-bound side)" if value >= ridge
                else "left of the ridge (the memory-bound side)")
        parts.append(f"{', '.join(names)} at {value:,.4g} FLOP/B, {value / ridge:.3g}x the ridge's {ridge:,.0f}: {side}")
    return "By their counted bytes: " + "; ".join(parts) + "."


def explain_xformers(ok: bool, why: str, times: Mapping[str, float] | None = None) -> str:
    """xFormers beside SDPA and the course kernel: measured times, or the probe's reason it cannot run."""
    if not ok:
        return f"xFormers cannot run here, so nothing is shown for it. The probe says: `{why}`."
    if not times or "xformers" not in times:
        return f"xFormers imports ({why}) but was not timed here."
    x = times["xformers"]
    others = "; ".join(f"{narrate.speed(x, t)} **{name}**" for name, t in times.items() if name != "xformers")
    return f"xFormers ({why}) took **{x * 1e3:.3g} ms**: " + (others or "no peer was timed beside it") + "."


def explain_steps(steps: Sequence[Mapping], table: Mapping[str, float | None] | None = None,
                  kernel: str | None = None) -> str:
    """The forward's steps (bench attention's STEPS), each against the step before.

    The steps are timed in a pass of their own, so they are compared only with each other. Against
    the peers, the sentence reads the run's table (`table`: variant -> TFLOP/s at the acceptance
    shape, the numbers explain_fastest words), for the course's fastest kernel there (`kernel`):
    one source of numbers per run, so two cells never rank the same kernels differently."""
    timed = [s for s in steps if s.get("tflops")]
    if not timed:
        return "No step of the forward was timed (they need a Hopper GPU with TMA)."
    parts = [f"**{timed[0]['step']}**: {timed[0]['tflops']:.0f} TFLOP/s"]
    for i, (previous, step) in enumerate(zip(timed, timed[1:])):
        before, what = previous, "the step before"
        if step.get("kernel") != previous.get("kernel"):
            # a new kernel starts from the old one at its best, not from its last try
            before = max((s for s in timed[:i + 1] if s.get("kernel") == previous.get("kernel")),
                         key=lambda s: s["tflops"])
            what = f"the fastest step before it ({before['step']})"
        parts.append(f"**{step['step']}**: {step['tflops']:.0f} TFLOP/s, "
                     f"{narrate.rate(step['tflops'], before['tflops'])} {what}")
    text = "; ".join(parts) + "."
    failed = [s["step"] for s in steps if not s.get("tflops")]
    if failed:
        text += f" Not timed here: {', '.join(failed)}."
    mine = (table or {}).get(kernel) if kernel else None
    if mine:
        peers = {"SDPA flash": table.get("sdpa flash"), "cuDNN": table.get("sdpa cudnn")}
        against = [f"{narrate.rate(mine, v)} {name}" for name, v in peers.items() if v]
        if against:
            text += (f" These steps were timed in a pass of their own; against the peers, the table of the same "
                     f"run says: **{kernel}** at **{mine:.0f} TFLOP/s**, " + " and ".join(against) + ".")
    return text
