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
