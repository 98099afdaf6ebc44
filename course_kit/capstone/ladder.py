"""The technique ladder of notebook 10: each technique's share of the capstone's throughput.

The capstone record (`course-kit bench capstone`) measures a cumulative ladder: HF `generate`,
then the course engine with continuous batching and a paged KV cache, + CUDA graphs, + fused
blocks, + the async loop. `ladder` turns it into steps (the gain of each technique given the ones
below it); `waterfall` composes the steps the learner keeps switched on. A set of techniques that
is a prefix of the ladder was measured as such; any other set is *composed* from the recorded
step gains (which assumes a step's gain does not depend on the techniques left out) and is
labelled so. `live_run` measures the engine variants that run here (on a CPU: without CUDA graphs
and fusion), for the widget's Run button.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..narrate import rate

TECHNIQUES = ("continuous batching + paged KV", "CUDA graphs", "fused blocks", "async loop")
# the record's row names, in ladder order (benchmarks/capstone.py engine_variants)
ROWS = ("HF generate", "engine: continuous + paged KV", "engine: + CUDA graphs", "engine: + fused blocks",
        "engine: + async loop")


def ladder(throughput: Mapping[str, float]) -> list[dict]:
    """[{technique, row, tok_s, gain}] for the ladder rows present in `throughput` (name -> tok/s);
    gain is this row over the previous present row."""
    rows = [(t, r) for t, r in zip(("HF generate",) + TECHNIQUES, ROWS) if r in throughput]
    if not rows or rows[0][1] != "HF generate":
        raise ValueError(f"the ladder starts at HF generate; rows found: {sorted(throughput)}")
    out, prev = [], None
    for tech, row in rows:
        v = float(throughput[row])
        if not v > 0:
            raise ValueError(f"throughput of {row!r} is {v!r}; it must be > 0")
        out.append({"technique": tech, "row": row, "tok_s": v, "gain": v / prev if prev else 1.0})
        prev = v
    return out


def waterfall(steps: Sequence[Mapping[str, Any]], enabled: Sequence[str]) -> dict:
    """The steps kept on, their product, and whether that set was measured or composed."""
    bad = [t for t in enabled if t not in TECHNIQUES]
    if bad:
        raise ValueError(f"unknown techniques {bad}; choose from {TECHNIQUES}")
    base = steps[0]["tok_s"]
    kept, value = [], base
    for s in steps[1:]:
        on = s["technique"] in enabled
        if on:
            value *= s["gain"]
        kept.append({**s, "on": on, "after": value})
    present = [s["technique"] for s in steps[1:]]
    on = [t for t in present if t in enabled]
    measured = on == present[: len(on)]
    return {"base": base, "steps": kept, "final": value, "measured": measured}


def explain_waterfall(w: Mapping[str, Any], where: str) -> str:
    """The readout: each kept step's gain in words, and the total against HF generate."""
    parts = [f"{s['technique']} {rate(s['gain'], 1.0)} the step below" for s in w["steps"] if s["on"]]
    if not parts:
        return f"On {where} with no technique switched on, the engine's row is HF `generate` itself."
    kind = ("measured in one run" if w["measured"] else
            "composed from the recorded step gains (this combination was not measured; each gain was "
            "measured with the techniques below it switched on)")
    return (f"On {where}: {'; '.join(parts)}. Together {w['final']:,.0f} tokens/s, "
            f"{rate(w['final'], w['base'])} HF `generate` ({w['base']:,.0f} tokens/s), {kind}.")


def explain_summary(summary: Mapping[str, Any], where: str) -> str:
    """The capstone record's headline: the full engine against each HF peer that ran, worded from
    the ratios."""
    thr = summary["throughput_tok_s"]
    full = summary["full_engine"]
    text = f"On {where}, the full engine ({full}) ran at **{thr[full]:,.0f} tokens/s**"
    peers = [n for n in ("HF generate", "HF generate_batch") if n in thr]
    if peers:
        text += ": " + " and ".join(f"**{rate(thr[full], thr[n])}** {n}" for n in peers)
    return text + "."
