"""The "what just happened" sentences of the speculative-decoding lesson, computed from the numbers.

Comparisons use `course_kit.narrate`'s wording, so faster/slower and more/less follow the measured
ratios; a cause is named only where the numbers show it (a verify pass that costs about one step, a
round that took longer than its steps).
"""
from __future__ import annotations

from typing import Mapping

from ... import narrate
from . import rules

ONE_STEP_WITHIN = 1.5     # a pass over M tokens "costs about one step" below 1.5 steps
CLOSE_WITHIN = 0.10       # measured within 10% of the predicted speed-up is "close"


def _ms(costs: Mapping, m: int) -> float:
    table = costs["target_ms"]
    return float(table[m] if m in table else table[str(m)])


def explain_verify_cost(costs: Mapping, where: str = "this run") -> str:
    """One pass of the target over M tokens against one over 1 token, and the draft's step: c."""
    rows = sorted(int(m) for m in costs["target_ms"])
    one, most = rows[0], rows[-1]
    t1, tm = _ms(costs, one), _ms(costs, most)
    ratio = tm / t1
    text = (f"In {where}, one pass of the main model over {one} token took {t1:.3f} ms and over {most} tokens "
            f"{tm:.3f} ms: **{ratio:.2f}x** the time for {most}x the tokens.")
    if ratio < ONE_STEP_WITHIN:
        text += (f" Verifying {most - 1} draft tokens costs about one step: at batch 1 the pass's time hardly "
                 f"depends on how many tokens it carries, so what it pays for is paid once per pass (reading "
                 f"every weight, launching every operation: notebook 05), not once per token.")
    elif ratio > 0.8 * most / one:
        text += (" Here every token costs nearly a full step: this device computes them one after another, so "
                 "a verify pass saves almost nothing over running the main model token by token.")
    else:
        text += " The pass is partly amortised: more than one step, less than one per token."
    c = costs.get("c")
    if c is not None:
        text += (f" A draft step took {costs['draft_ms']:.3f} ms, so a draft token costs c = **{c:.3f}** of a "
                 f"main-model step.")
    return text


def _has(costs: Mapping, m: int) -> bool:
    return m in costs["target_ms"] or str(m) in costs["target_ms"]


def round_ms(row: Mapping) -> float:
    """Measured milliseconds per round: tokens per round over tokens per second."""
    return row["tokens_per_round"] / row["tokens_per_s"] * 1e3


def explain_speedup(row: Mapping, base_tokens_per_s: float, costs: Mapping, where: str = "this run") -> str:
    """One k: acceptance, Leviathan et al.'s prediction from alpha and c, the measured speed-up, and
    where a gap between them went."""
    k, alpha, tpr = row["k"], row["alpha"], row["tokens_per_round"]
    c = costs["c"]
    pred = rules.predicted_speedup(alpha, k, c)
    meas = row["tokens_per_s"] / base_tokens_per_s
    text = (f"In {where}, with k = {k} draft tokens a round, each draft position was kept at a rate "
            f"alpha = **{alpha:.2f}**, and a round emitted **{tpr:.2f}** tokens (the formula's "
            f"(1 - alpha^(k+1))/(1 - alpha) gives {rules.expected_tokens(alpha, k):.2f}). From alpha and "
            f"c = {c:.3f}, Leviathan et al.'s formula predicts **{pred:.2f}x**; measured: "
            f"{row['tokens_per_s']:,.0f} tokens/s, **{meas:.2f}x**, {narrate.rate(row['tokens_per_s'], base_tokens_per_s)} "
            f"the main model alone.")
    steps_ms = k * costs["draft_ms"] + _ms(costs, 1)
    took = round_ms(row)
    if meas < pred * (1 - CLOSE_WITHIN):
        text += (f" The measurement falls short of the prediction: the formula charges a round k draft steps and "
                 f"one main-model step, {steps_ms:.3f} ms; the round took {took:.3f} ms, so {took - steps_ms:.3f} ms "
                 f"a round went to what the formula leaves out (the acceptance and bookkeeping kernels, the "
                 f"draft's two-token first step, the verify pass's extra tokens).")
        if _has(costs, k + 1):
            verify = _ms(costs, k + 1)
            charged = k * costs["draft_ms"] + verify
            again = rules.predicted_speedup_from_costs(alpha, k, costs["draft_ms"], _ms(costs, 1), verify)
            text += (f" The verify pass over {k + 1} tokens was timed at {verify:.3f} ms, "
                     f"{verify / _ms(costs, 1):.2f}x one step; charging the round that pass instead of one step "
                     f"({charged:.3f} ms) predicts **{again:.2f}x**, ")
            text += ("which the measurement matches within 10%: the verify pass's extra tokens account for the gap."
                     if abs(meas - again) <= CLOSE_WITHIN * again else
                     f"and {took - charged:.3f} ms a round is still unaccounted for.")
    elif meas > pred * (1 + CLOSE_WITHIN):
        more = tpr > rules.expected_tokens(alpha, k) * (1 + CLOSE_WITHIN / 2)
        text += (" The measurement beats the prediction: " + (
            "rounds kept more tokens than independent positions with the same alpha would (acceptances came in runs)."
            if more else f"the round took {took:.3f} ms, less than its steps timed alone ({steps_ms:.3f} ms)."))
    else:
        text += " The measurement is close to the prediction."
    return text


def explain_best(rows: list[Mapping], base_tokens_per_s: float, hf_assisted_tokens_per_s: float | None = None,
                 where: str = "this run") -> str:
    """The best k against the main model alone and HF's assisted generation on the same pair."""
    spec = [r for r in rows if r.get("k")]
    if not spec:
        raise ValueError("no speculative rows (k >= 1) to compare")
    best = max(spec, key=lambda r: r["tokens_per_s"])
    text = (f"In {where}, the fastest was k = {best['k']}: {best['tokens_per_s']:,.0f} tokens/s, "
            f"{narrate.rate(best['tokens_per_s'], base_tokens_per_s)} the main model alone "
            f"({base_tokens_per_s:,.0f} tokens/s)")
    if hf_assisted_tokens_per_s:
        text += (f", and {narrate.rate(best['tokens_per_s'], hf_assisted_tokens_per_s)} HF's assisted generation "
                 f"on the same two checkpoints ({hf_assisted_tokens_per_s:,.0f} tokens/s)")
    ks = [r["k"] for r in sorted(spec, key=lambda r: r["k"])]
    if best["k"] not in (ks[0], ks[-1]):
        text += (". Fewer draft tokens leave speed unused when the draft is right; more waste draft steps "
                 "on tokens that are rejected")
    return text + "."


def explain_batch(points: list[Mapping], ridge: float, where: str = "the roofline model") -> str:
    """The predicted speed-up across batch sizes, and the verify pass's cost in plain steps."""
    if not points:
        raise ValueError("no points")
    first, last = points[0], points[-1]
    k = first["k"]
    text = (f"In {where}, with k = {k} and alpha = {first['alpha']:.2f}: at batch {first['batch']} verifying "
            f"{k + 1} tokens per sequence costs {first['verify_over_step']:.2f} plain steps and speculation is "
            f"predicted at **{first['speedup']:.2f}x**; at batch {last['batch']} the verify pass carries "
            f"{last['batch'] * (k + 1):,} tokens, costs {last['verify_over_step']:.2f} plain steps, and the "
            f"prediction is **{last['speedup']:.2f}x**.")
    crossed = next((p for p in points if p["batch"] * (k + 1) > ridge), None)
    if crossed is not None:
        text += (f" From batch {crossed['batch']} on, a verify pass carries more than the ridge point's "
                 f"{ridge:,.0f} tokens (peak FLOP/s over bandwidth): its FLOPs, no longer its bytes, set its time, "
                 f"so the k + 1 tokens cost more plain steps the larger the batch.")
    else:
        text += f" No verify pass shown reaches the ridge point's {ridge:,.0f} tokens (peak FLOP/s over bandwidth)."
    below = next((p for p in points if p["speedup"] <= 1.0), None)
    if below is not None:
        text += f" From batch {below['batch']} on, speculation no longer pays."
    else:
        text += f" Speculation still pays at every batch shown, by less as the batch grows."
    return text
