"""Sentences of notebook 09 about expert and context parallelism, worded from their numbers."""
from __future__ import annotations

from typing import Sequence


def explain_load(tokens_per_expert: Sequence[int]) -> str:
    """How evenly the router spread the (token, expert) pairs (§6)."""
    if not tokens_per_expert or min(tokens_per_expert) < 0:
        raise ValueError(f"need non-negative counts per expert, got {list(tokens_per_expert)!r}")
    hi, lo = max(tokens_per_expert), min(tokens_per_expert)
    if hi == lo:
        return f"Routing came out even here: every expert got **{hi}** tokens."
    return (f"Routing is uneven: the busiest expert got **{hi}** tokens and the idlest **{lo}** "
            f"({hi / max(lo, 1):.2f}x); real systems add a load-balancing loss and a capacity limit.")


def explain_causal_blocks(blocks_per_rank: Sequence[int]) -> str:
    """How unequal the ranks' work is under a causal mask in ring attention (§7)."""
    if not blocks_per_rank or min(blocks_per_rank) < 0:
        raise ValueError(f"need non-negative block counts, got {list(blocks_per_rank)!r}")
    if max(blocks_per_rank) == min(blocks_per_rank):
        return f"With a causal mask every rank computed **{blocks_per_rank[0]}** K/V blocks: equal work."
    return (f"With a causal mask the ranks do unequal work: K/V blocks computed per rank "
            f"{list(blocks_per_rank)}, so the busiest waits for nothing while the others idle; real "
            f"systems reorder the chunks (zigzag) to even it out.")


def explain_ep_cp_speed(record: dict, where: str, what: str) -> str:
    """EP ("ep_moe") or CP ("ring_attention") rows of a parallel record against one GPU/process."""
    from ..narrate import ratio_words
    if what not in ("ep_moe", "ring_attention"):
        raise ValueError(f"what={what!r}; choose 'ep_moe' or 'ring_attention'")
    rows = [r for r in record.get("results", []) if r.get("name") == what and r.get("n", 1) > 1
            and "speedup" in r]
    label = "the MoE layer" if what == "ep_moe" else "ring attention"
    if not rows:
        return (f"{where} has no {label} timings at more than one rank "
                f"(`course-kit bench parallel` records them on a machine with 2 or more GPUs).")
    parts = []
    for r in rows:
        kind = "" if what == "ep_moe" else (" (causal)" if r["causal"] else " (no mask)")
        parts.append(f"over {r['n']} ranks{kind} {label} runs **{ratio_words(r['speedup'])}** one rank "
                     f"holding everything ({r['median_s'] * 1e3:,.3f} ms; float32 check within "
                     f"{r['max_rel_err_fp32']:.1e})")
    return f"On {where}: " + "; ".join(parts) + "."
