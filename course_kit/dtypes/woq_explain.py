"""Notebook 01 §7's words on weight-only decode, computed from a `course-kit bench woq` record (issue 48).

Why weight-only quantisation pays at batch 1 (the step's time follows its bytes), how much of the
byte saving the step keeps (what does not shrink with the weights), where it stops paying (the
roofline crossing, beside the measured peers), and what each format costs in quality. Every
comparative word comes from the numbers through `narrate`; tests/test_woq_explain.py drives each
sentence both ways.
"""
from __future__ import annotations

from ..narrate import SAME_WITHIN, rate, speed

FORMAT_WORDS = {"int8": "int8 (one scale per row)", "int4": "int4 (a scale and a zero per group)"}
# Greedy agreement below this share of positions is explained as what it measures (explain_error).
LOW_AGREEMENT = 0.5


def dtype_label(name: str | None) -> str:
    """'bf16', 'fp16' or 'fp32' for a record's dtype name ('bfloat16', 'torch.float16', ...)."""
    key = str(name or "").replace("torch.", "")
    return {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}.get(key, key or "bf16")


def _runners(results: list[dict]) -> dict:
    return {(r["model"], r["format"]): r for r in results if r.get("kind") == "runner" and r.get("tokens_per_s")}


def products_time_per_token(results: list[dict], model: str, fmt: str, n_layers: int) -> float | None:
    """The step's products at M = 1 (one layer's four, times the layers, and the logits), from their
    back-to-back timings: seconds per token."""
    t = {r["product"]: r["median_s"] for r in results
         if r.get("kind") == "product" and r.get("model") == model and r.get("format") == fmt and r.get("median_s")}
    if not all(k in t for k in ("wqkv", "wo", "w13", "w2", "head")):
        return None
    return n_layers * (t["wqkv"] + t["wo"] + t["w13"] + t["w2"]) + t["head"]


def _size(nbytes: float) -> str:
    return f"{nbytes / 1e9:.2f} GB" if nbytes >= 1e8 else f"{nbytes / 1e6:.2f} MB"


def explain_decode(results: list[dict]) -> str:
    """Batch-1 decode per model: tokens/s and bytes per token of each format, each quantised format
    against the unquantised step (bf16 on a GPU with bf16 tensor cores; its dtype is named), and
    whether it kept its byte ratio (with the time that did not shrink, when the products were timed)."""
    runners = _runners(results)
    models = list(dict.fromkeys(m for m, f in runners if f == "bf16"))
    if not models:
        return "No batch-1 decode in this record."
    paras = []
    for model in models:
        b = runners[(model, "bf16")]
        dense = b.get("dtype", "bf16")
        text = [f"**{model}, batch 1.** {dense}: **{b['tokens_per_s']:,.0f} tokens/s**, reading "
                f"{_size(b['bytes_per_token'])} per token at {b['fraction_of_copy']:.0%} of the copy bandwidth."]
        for fmt in ("int8", "int4"):
            q = runners.get((model, fmt))
            if q is None:
                continue
            speedup, fewer = q["tokens_per_s"] / b["tokens_per_s"], b["bytes_per_token"] / q["bytes_per_token"]
            text.append(f"{FORMAT_WORDS[fmt]}: **{q['tokens_per_s']:,.0f} tokens/s**, "
                        f"{rate(q['tokens_per_s'], b['tokens_per_s'])} {dense}; it reads {fewer:.2f}x fewer bytes "
                        f"({_size(q['bytes_per_token'])}) at {q['fraction_of_copy']:.0%} of the copy bandwidth.")
            text.append(_kept(model, fmt, speedup, fewer, q, b, results, q.get("n_layers"), dense))
        paras.append(" ".join(t for t in text if t))
    return "\n\n".join(paras)


def _kept(model: str, fmt: str, speedup: float, fewer: float, q: dict, b: dict, results: list[dict],
          layers: int | None, dense: str = "bf16") -> str:
    """Whether the format kept its byte ratio in tokens/s, and if not, the time that did not shrink."""
    if speedup >= fewer * (1 - SAME_WITHIN):
        return f"The step's time followed its bytes: {fmt} kept the whole byte ratio."
    text = (f"In tokens/s {fmt} kept {speedup / fewer:.0%} of its byte ratio: its share of the copy bandwidth "
            f"fell from {dense}'s {b['fraction_of_copy']:.0%} to {q['fraction_of_copy']:.0%}.")
    prod = products_time_per_token(results, model, fmt, layers) if layers else None
    if prod is not None:
        rest = q["ms_per_token"] * 1e-3 - prod
        if rest > 0:
            text += (f" Its products take about {prod * 1e6:,.0f} µs of its {q['ms_per_token'] * 1e3:,.0f} µs per "
                     f"token (their timings at M = 1, times {layers} layers, plus the logits); the other "
                     f"{rest * 1e6:,.0f} µs (attention over the cache, the kernels' starts and tails) do not "
                     f"shrink with the weights.")
    return text


def explain_gemv(results: list[dict], copy_gbs: float | None, model: str = "llama-1b") -> str:
    """The products at M = 1, back to back: the rate each format reads its bytes at."""
    rows = [r for r in results if r.get("kind") == "product" and r.get("median_s")]
    if not any(r["model"] == model for r in rows):
        model = rows[0]["model"] if rows else model
    mine = [r for r in rows if r["model"] == model]
    if not mine or not copy_gbs:
        return "No products were timed in this record."
    dense = next((r.get("dtype") for r in results if r.get("kind") == "runner" and r.get("model") == model
                  and r.get("dtype")), "bf16")
    parts = []
    for fmt in ("bf16", "int8", "int4"):
        f = [r for r in mine if r["format"] == fmt]
        if f:
            nbytes, secs = sum(r["weight_bytes"] for r in f), sum(r["median_s"] for r in f)
            label = dense if fmt == "bf16" else fmt
            parts.append(f"{label} {nbytes / secs / 1e9:,.0f} GB/s ({nbytes / secs / 1e9 / copy_gbs:.0%})")
    return (f"{model}'s products at M = 1 (one layer's four and the logits, each launched back to back as in the "
            f"step) read their bytes at " + ", ".join(parts) + f", against a copy bandwidth of {copy_gbs:,.0f} GB/s.")


def _batch(m: float | None) -> str:
    """A crossing batch as text; None or infinite: the product never turns compute-bound."""
    return "no batch (it stays memory-bound)" if m is None or m == float("inf") else f"M ≈ {m:,.0f}"


def explain_crossing(entry: dict, shape: str, ceilings: dict) -> str:
    """Where weight-only stops paying for one product shape: the roofline's batches, then the peers'."""
    p, n, k = entry["predicted"], entry["n"], entry["k"]
    text = (f"For {shape} ({n:,} x {k:,}) on this roofline (copy {ceilings['copy_gbs']:,.0f} GB/s, matmul "
            f"{ceilings['matmul_tflops']:,.3g} TFLOP/s), batch 1 is memory-bound: int8 can be up to "
            f"{p['int8']['speedup_at_batch_1']:.2f}x and int4 up to {p['int4']['speedup_at_batch_1']:.2f}x faster than "
            f"bf16. int4 turns compute-bound at {_batch(p['int4']['compute_bound_from'])}, int8 at "
            f"{_batch(p['int8']['compute_bound_from'])}, bf16 at {_batch(p['bf16']['compute_bound_from'])}")
    bf16 = p["bf16"]["compute_bound_from"]
    text += (": at this shape the activations' own bytes keep every format memory-bound, so the roofline "
             "keeps the byte ratio at every batch." if bf16 is None or bf16 == float("inf") else
             ": between a format's crossing and bf16's its advantage shrinks, and past bf16's it is gone.")
    peers = (("int8", "torch's int8 (dequantise, then matmul)"), ("int4", "torch's int4 (tinygemm)"))
    measured = [_measured(name, entry.get("measured", {}).get(fmt) or {}) for fmt, name in peers]
    measured = [m for m in measured if m]
    if measured:
        text += " Measured: " + "; ".join(measured) + "."
    return text


def _measured(name: str, m: dict) -> str:
    faster, slower = m.get("faster_at") or [], m.get("slower_at") or []
    ms = lambda xs: ", ".join(str(x) for x in xs)  # noqa: E731
    if not faster and not slower:
        return ""
    if not faster:
        return f"{name} was never faster than bf16, not even at M = {min(slower)}"
    if not slower:
        return f"{name} was faster than bf16 at every measured M, up to {max(faster)}"
    if max(faster) < min(slower):
        return f"{name} was faster than bf16 up to M = {max(faster)} and not from M = {min(slower)}"
    return f"{name} was faster than bf16 at M = {ms(faster)} and not at M = {ms(slower)}"


def explain_error(quality: dict, reference: str = "bf16", random_weights: bool = True) -> str:
    """What each format costs in quality, per model: greedy agreement with the unquantised step
    (`reference` names its dtype) and max |Δlogit|, beside the floor that rounding alone sets (the bf16
    Triton step against eager), when the record has it. Where a format agrees at fewer than
    LOW_AGREEMENT of the positions on `random_weights`, what that agreement measures (`_low_agreement`)."""
    if not quality:
        return "No quality comparison in this record."
    paras = []
    for model, q in quality.items():
        parts = [f"{fmt} chose the {reference} step's token at **{q[fmt]['agreement']:.1%}** of "
                 f"{q[fmt]['positions']} positions (max |Δlogit| {q[fmt]['max_abs_dlogit']:.3g})"
                 for fmt in ("int8", "int4") if fmt in q]
        text = f"**{model}:** " + "; ".join(parts) + "."
        floor = q.get("bf16_triton_vs_eager")
        if floor:
            text += (f" For scale, the bf16 Triton step and the model's eager step, which differ only in rounding, "
                     f"agree at {floor['agreement']:.1%} (max |Δlogit| {floor['max_abs_dlogit']:.3g}).")
        if "int8" in q and "int4" in q:
            text += " " + _which_costs_more(q["int8"], q["int4"])
        low = [fmt for fmt in ("int8", "int4") if fmt in q and q[fmt]["agreement"] < LOW_AGREEMENT]
        if low and random_weights:
            text += " " + _low_agreement({fmt: q[fmt] for fmt in low}, floor)
        paras.append(text)
    return "\n\n".join(paras)


def _low_agreement(low: dict, floor: dict | None) -> str:
    """Why a low greedy agreement on random weights says little about the kernel: their top logits sit
    close together (rounding alone flips some picks, where the floor was measured), so a format's
    quantisation noise flips more; the kernel itself is checked against its dequantised twin."""
    names = " and ".join(f"{fmt}'s {q['agreement']:.1%}" for fmt, q in low.items())
    noise = max(q["max_abs_dlogit"] for q in low.values())
    text = f"Agreement as low as {names} needs reading with care: the model's weights are random"
    if floor and floor["agreement"] < 1:
        text += (f", and its top logits sit so close together that rounding alone (the bf16 Triton step against "
                 f"eager) changed {1 - floor['agreement']:.1%} of the picks with |Δlogit| at most "
                 f"{floor['max_abs_dlogit']:.3g}")
    return (text + f". There greedy agreement measures quantisation noise (|Δlogit| up to {noise:.3g}) against "
            f"near-tied logits, not the kernel, which is checked against the fp32 matmul of its own "
            f"dequantised weights.")


def _which_costs_more(q8: dict, q4: dict) -> str:
    """Which format moved the step further from bf16, when agreement and |Δlogit| say the same."""
    a8, a4, d8, d4 = q8["agreement"], q4["agreement"], q8["max_abs_dlogit"], q4["max_abs_dlogit"]
    if d8 <= 0 or d4 <= 0:
        return ""
    by_d = None if abs(d4 / d8 - 1) <= SAME_WITHIN else ("int4" if d4 > d8 else "int8")
    by_a = None if a4 == a8 else ("int4" if a4 < a8 else "int8")
    if by_d is None and by_a is None:
        return "Here the two cost about the same."
    if by_d is not None and by_a is not None and by_d != by_a:
        return "Agreement and |Δlogit| point opposite ways here: neither format clearly costs more."
    worse = by_a or by_d
    better = "int8" if worse == "int4" else "int4"
    why = ("16 levels per group against int8's 255 per row" if worse == "int4" else
           "one scale for a whole row against int4's scale and zero per group")
    return (f"{worse} costs more than {better}: its logits moved {max(d4, d8) / min(d4, d8):.1f}x further ({why}).")


def explain_packed(rows: list[dict]) -> str:
    """The live check of the fused products: each format's bytes against the unquantised weight's,
    and its error against the fp32 matmul of its own dequantised weights.
    rows: {"format", "bytes", "dense_bytes", "dense_dtype", "rel_error", "n", "k", "group_size"}."""
    if not rows:
        return "No product was run."
    parts = []
    for r in rows:
        ratio = r["dense_bytes"] / r["bytes"]
        words = f"{ratio:.2f}x fewer bytes than" if ratio > 1 else f"{1 / ratio:.2f}x more bytes than"
        group = f", groups of {r['group_size']}" if r["format"] == "int4" else ""
        parts.append(f"{r['format']}{group}: {r['bytes'] / 1e6:,.3f} MB of codes and scales, {words} the "
                     f"{r['dense_dtype']} weights ({r['dense_bytes'] / 1e6:,.3f} MB); its product matches the fp32 "
                     f"matmul of its dequantised weights to a relative error of {r['rel_error']:.1e}")
    n, k = rows[0]["n"], rows[0]["k"]
    return f"A {n:,} x {k:,} weight, one row of activations. " + "; ".join(parts) + "."


def explain_point(point: dict) -> str:
    """The widget's line for one (shape, format, batch): bytes, the roofline's time and the measured one."""
    text = (f"{point['format']} at M = {point['m']}: {point['bytes'] / 1e6:,.2f} MB moved, "
            f"{point['flops'] / 1e9:,.2f} GFLOP; the roofline says at least {point['predicted_s'] * 1e6:,.1f} µs "
            f"({point['bound']}-bound).")
    if point.get("measured_s") and point["measured_s"] >= point["predicted_s"]:
        text += (f" Recorded ({point['kernel']}): {point['measured_s'] * 1e6:,.1f} µs, "
                 f"{point['predicted_s'] / point['measured_s']:.0%} of the roofline's speed.")
    elif point.get("measured_s"):
        text += (f" Recorded ({point['kernel']}): {point['measured_s'] * 1e6:,.1f} µs, "
                 f"{point['predicted_s'] / point['measured_s']:.1f}x quicker than the roofline allows: the ceilings "
                 f"measured on this machine are below what this kernel reached, so here they bound nothing.")
    elif point.get("why_not"):
        text += f" Not recorded: {point['why_not']}."
    else:
        text += " No recorded time at this batch."
    if point.get("bf16_measured_s") and point.get("measured_s") and point["format"] != "bf16":
        text += f" It ran {speed(point['measured_s'], point['bf16_measured_s'])} bf16 at the same M."
    return text
