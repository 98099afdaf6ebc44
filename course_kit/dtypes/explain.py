"""Notebook 01's "what just happened" sentences, computed from the formats' limits and the records.

- `explain_range_precision`: which of two formats has the range and which the precision, from their
  max and eps (issue 19 item 11: bf16, not fp16, pays for its range with precision).
- `explain_throughput`: each measured matmul rate against bf16's, beside the datasheet's ratio and
  each one's fraction of its own peak (issue 19 item 12: int8 measured 1.24x bf16, not 2x); a live
  run's bf16 rate is named as this run's when it is >15% off the record of the same GPU (issue 40).
- `explain_e4m3_overflow`: what this torch does beyond e4m3fn's 448, and which PyTorch change decides it.
- `explain_capacity`: a GPU's memory as torch reports it, in GiB, beside its datasheet's "GB".
- `explain_dtype_rates`: notebook 00's matmul rates by dtype, bf16 against strict fp32 here and on the
  reference.
- `format_value`: a format's limit as text, powers of two exactly (e4m3's eps is 0.125, not 0.12).
"""
from __future__ import annotations

import math
from typing import Mapping

from .. import narrate
from . import woq
from .formats import get_format


def format_value(v: float) -> str:
    """A format's limit as the text states it, exactly where it can be short: a power of two from 2^-12
    to 2^12 as its full decimal (e4m3's eps 0.125, not '0.12'), another power of two as 2^k, an
    integer below 10^7 in full (e5m2's max 57344), anything else to 3 significant digits."""
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"a format's limit is a finite positive number, got {v!r}")
    mantissa, exponent = math.frexp(v)
    if mantissa == 0.5:                       # v = 2**(exponent - 1)
        k = exponent - 1
        return repr(float(v)).removesuffix(".0") if -12 <= k <= 12 else f"2^{k}"
    if v == int(v) and v < 1e7:
        return f"{int(v)}"
    return f"{v:.3g}"


def explain_range_precision(a: str, b: str) -> str:
    """'bf16 reaches 3.39e+38 against fp16's 65504 ...; bf16 pays for that range with precision:
    eps 0.0078125 against 0.0009765625, 8x coarser'. Works for any two float formats, in either order;
    the limits are printed by `format_value` (powers of two exactly)."""
    fa, fb = get_format(a), get_format(b)
    for f in (fa, fb):
        if f.kind != "float":
            raise ValueError(f"{f.name} is not a floating-point format; range and precision need floats")
    wide, narrow = (fa, fb) if fa.max >= fb.max else (fb, fa)
    v = format_value
    if wide.max == narrow.max:
        range_part = f"{fa.name} and {fb.name} reach the same max, {v(wide.max)}"
    else:
        range_part = (f"{wide.name} ({wide.exponent_bits} exponent bits) reaches **{v(wide.max)}** against "
                      f"{narrow.name}'s **{v(narrow.max)}** ({narrow.exponent_bits} exponent bits)")
    if wide.eps > narrow.eps:
        prec = (f"{wide.name} pays for that range with precision: eps **{v(wide.eps)}** against "
                f"{narrow.name}'s **{v(narrow.eps)}** ({wide.eps / narrow.eps:.0f}x coarser, "
                f"{wide.mantissa_bits} mantissa bits against {narrow.mantissa_bits})")
    elif wide.eps < narrow.eps:
        prec = (f"and it is also the more precise: eps **{v(wide.eps)}** against {narrow.name}'s "
                f"**{v(narrow.eps)}**")
    else:
        prec = f"with the same precision, eps {v(wide.eps)}"
    return f"{range_part}; {prec}."


def explain_throughput(summary: Mapping, results: list[Mapping], gpu: str, n: int | None = None,
                       recorded: list[Mapping] | None = None, live: bool = False) -> str:
    """Each format's matmul rate against bf16's as measured, next to the ratio of their datasheet peaks
    and the fraction of its own peak each reached. Says where a format fell short of its datasheet
    ratio; names no cause beyond the fractions of peak, which the record holds.

    Every ratio comes from one run (`results`). `recorded`: the record of the same GPU when `results`
    is a live run; bf16's rate is then stated as narrate.live_vs_record does (named as this run's when
    more than 15% off the record, the notebook.headline text), and a format whose ratio to bf16 the
    record words differently (faster against slower, or more than 15% apart) gets the record's ratio
    beside it. `live`: `results` come from a run in this notebook, not from a record (the text then
    says what this run, not the record, leaves unexplained)."""
    by = {r.get("variant", r["name"]): r for r in results if r.get("tflops")}
    rec = {r.get("variant", r["name"]): r for r in recorded or [] if r.get("tflops")}
    if "bf16" not in by:
        return f"On the {gpu}: no bf16 matmul was measured, so nothing is compared with it."
    b = by["bf16"]
    rb = rec.get("bf16")
    rate = narrate.live_vs_record(b["tflops"], rb["tflops"] if rb else None, "TFLOP/s", 0)
    lines = [f"On the {gpu}{f' at n = {n:,}' if n else ''}: bf16 ran **{rate}**"
             + (f" ({b['fraction_of_peak']:.0%} of its datasheet peak)." if b.get("fraction_of_peak") else ".")]
    for key in ("fp32", "tf32", "fp16", "fp8", "fp8_fast", "int8"):
        r = by.get(key)
        if r is None:
            continue
        measured = r["tflops"] / b["tflops"]
        label = r["name"]
        text = f"- {label}: {narrate.ratio_words(measured)} bf16 ({measured:.2f}x bf16's rate)"
        if rb and key in rec:
            then = rec[key]["tflops"] / rb["tflops"]
            if (measured > 1) != (then > 1) or not narrate.agrees_with_record(measured, then):
                text += f" in this run; the record: {narrate.ratio_words(then)} bf16 ({then:.2f}x)"
        if r.get("peak_tflops") and b.get("peak_tflops"):
            spec = r["peak_tflops"] / b["peak_tflops"]
            text += f"; its datasheet peak (dense) is {spec:.2f}x bf16's"
            if r.get("fraction_of_peak") is not None:
                text += f", and it reached {r['fraction_of_peak']:.0%} of its own peak"
                if spec > 1.0 and measured < 0.8 * spec:
                    text += (f": it fell short of the datasheet's ratio because it ran further from its peak "
                             f"than bf16 did ({r['fraction_of_peak']:.0%} against {b['fraction_of_peak']:.0%}); "
                             f"{_source(live)} does not show why")
        lines.append(text + ".")
    return "\n".join(lines)


def _source(live: bool) -> str:
    """Who measured the numbers a sentence talks about: a run of this notebook, or a record."""
    return "this run" if live else "the record"


def explain_weight_only(rows: list[Mapping], where: str, live: bool = False) -> str:
    """Weight-only int8/int4 against bf16 weights (issue 20): time, weight bytes moved per second,
    the error against the dequantised weights (the kernel's own) and the quantisation error.
    `live`: the rows come from a run in this notebook, not from a record."""
    by = {r["kind"]: r for r in rows}
    b = by.get("bf16")
    if not b or not b.get("median_s"):
        return f"{where}: the bf16 peer was not measured, so nothing is compared."
    m, n = b["m"], b["n"]
    lines = [f"{where}, x[{m} x {n:,}] (bf16) times a {n:,} x {n:,} weight matrix: bf16 weights "
             f"{b['median_s'] * 1e6:,.1f} µs ({b['weight_gbs']:,.0f} GB/s of weights read)."]
    for k in ("int8", "int4"):
        r = by.get(k)
        if r is None:
            continue
        if r.get("skipped"):
            lines.append(f"- {k}: not run here ({r['skipped']}).")
            continue
        gs = f", groups of {r['group_size']}" if r.get("group_size") else ""
        gsize = r.get("group_size") or 128
        moved = woq.weight_bytes_moved(n, n, k, r["kernel"], gsize)
        stored = f"stored in {b['weight_bytes'] / r['weight_bytes']:.1f}x fewer bytes than bf16"
        if moved > woq.weight_bytes(n, n, k, gsize):     # the unfused path: a bf16 copy written and read back
            traffic = (f"{stored}, but this path first writes a bf16 copy of them in a kernel of its own and "
                       f"the matmul reads that copy: {moved / b['weight_bytes']:.1f}x the weight bytes of bf16 "
                       f"cross memory ({moved / r['median_s'] / 1e9:,.0f} GB/s)")
        else:
            traffic = f"{stored} and read once ({r['weight_gbs']:,.0f} GB/s of weights)"
            if r["median_s"] > b["median_s"] * (1 + narrate.SAME_WITHIN):
                traffic += (f": fewer bytes did not make it faster here, as it read them at "
                            f"{r['weight_gbs'] / b['weight_gbs']:.0%} of bf16's rate; {_source(live)} does not show why")
        lines.append(f"- {k} weights{gs} (`{r['kernel']}`): {r['median_s'] * 1e6:,.1f} µs, "
                     f"**{narrate.speed(r['median_s'], b['median_s'])}** bf16 weights; {traffic}. "
                     f"Result within {r['rel_error_vs_dequantised']:.1e} of the fp32 matmul of its dequantised "
                     f"weights, which differ from the originals by {r['quantisation_error']:.1%}.")
    return "\n".join(lines)


def explain_e4m3_overflow(beyond: float, at_inf: float, torch_version: str) -> str:
    """What this torch stored for 10000 (`beyond`) and inf (`at_inf`) cast to e4m3fn, named as
    saturating or not, with the PyTorch change that decides it (fp8_overflow's docstring)."""
    from .fp8_overflow import CHANGE
    pr, when = CHANGE
    def word(v: float) -> str:
        return "NaN" if math.isnan(v) else f"{v:g}"
    head = (f"On this machine (torch **{torch_version}**), casting 10000 to e4m3fn gives **{word(beyond)}** "
            f"and casting inf gives **{word(at_inf)}**: ")
    if beyond == 448.0 and at_inf == 448.0:
        return (head + f"this PyTorch **saturates** beyond the range, as PyTorch's cast has since {pr} "
                f"({when}). Releases before that change return NaN there (torch 2.11 does), so code that "
                f"relies on either behaviour breaks on the other.")
    if math.isnan(beyond) and math.isnan(at_inf):
        return (head + f"this PyTorch **returns NaN** beyond the range, as PyTorch's cast did until {pr} "
                f"({when}) made it saturate to ±448 (torch 2.13 does), so code that relies on either "
                f"behaviour breaks on the other.")
    return (head + "this PyTorch treats a finite overflow and an infinity differently, which neither of the "
            f"behaviours described in {pr} does: check what your build does before relying on it.")


def explain_capacity(gpus: list[str]) -> str:
    """What torch reports for each GPU, in GiB and in 10^9 bytes, against its datasheet's "GB"
    (memory.GPU_MEMORY_GIB, memory.DATASHEET_GB): the datasheet figure is a rounded name."""
    from .memory import DATASHEET_GB, GPU_MEMORY_GIB, GiB
    parts = []
    for g in gpus:
        if g not in GPU_MEMORY_GIB:
            raise ValueError(f"unknown GPU {g!r}; choose from {list(GPU_MEMORY_GIB)}")
        gib, sheet = GPU_MEMORY_GIB[g], DATASHEET_GB.get(g)
        decimal = gib * GiB / 1e9
        text = f"the {g} reports **{gib:.1f} GiB** ({decimal:.1f} × 10⁹ bytes)"
        if sheet is not None:
            rel = "more than" if decimal > sheet else ("less than" if decimal < sheet else "exactly")
            text += f", {rel} the \"{sheet:g} GB\" of its datasheet"
        parts.append(text)
    return "; ".join(parts) + "."


def explain_dtype_rates(rates: Mapping[str, float], n: int, ref_rates: Mapping[str, float] | None = None,
                        ref_gpu: str = "", ref_n: int | None = None) -> str:
    """Notebook 00's matmul rates by dtype: the fastest here, and how far apart bf16 and strict fp32
    are on this machine (where both were measured) and on the reference (where it has both)."""
    if not rates:
        raise ValueError("no matmul rates measured")
    best = max(rates, key=rates.get)
    text = f"Fastest dtype here: **{best}** at **{rates[best]:.3g} TFLOP/s** (n = {n})"
    ref_has_both = bool(ref_rates) and "bf16" in ref_rates and "fp32" in ref_rates
    if "bf16" in rates and "fp32" in rates:
        text += f"; bf16 runs **{narrate.rate(rates['bf16'], rates['fp32'])}** strict fp32 here."
    else:
        text += (f". Only {', '.join(sorted(rates))} was measured here"
                 + (", so how far apart bf16 and strict fp32 are is shown for the reference alone." if ref_has_both
                    else "."))
    if ref_has_both:
        text += (f" The reference {ref_gpu}{f' at n = {ref_n}' if ref_n else ''}: bf16 **{ref_rates['bf16']:.0f} "
                 f"TFLOP/s**, strict fp32 **{ref_rates['fp32']:.0f} TFLOP/s**: bf16 runs "
                 f"{narrate.rate(ref_rates['bf16'], ref_rates['fp32'])} strict fp32 there.")
    return text
