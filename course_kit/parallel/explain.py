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
    if what == "ring_attention":
        return f"On {where}: " + "; ".join(explain_cp_row(r) for r in rows) + "."
    parts = [f"over {r['n']} ranks the MoE layer runs **{ratio_words(r['speedup'])}** one rank holding "
             f"everything ({r['median_s'] * 1e3:,.3f} ms; float32 check within {r['max_rel_err_fp32']:.1e})"
             for r in rows]
    return f"On {where}: " + "; ".join(parts) + "."


OVER_BOUND = 0.05     # a ratio this far above what the split allows is named as such


def explain_cp_row(r: dict) -> str:
    """One ring-attention row against its one-rank peer, held against what the block split allows
    (context.speedup_bound). Rows from before the fair peer (the one-rank time of one whole S x S
    block) are named as such, and their ratio is not presented as the parallelism's."""
    from ..narrate import ratio_words, speed
    n, kind = r["n"], "causal" if r["causal"] else "no mask"
    t = r["median_s"] * 1e3
    if "bound" not in r:          # an older record: the only peer is one whole S x S block
        bound = r.get("bound_whole_block") or float(n)
        text = (f"over {n} ranks ({kind}) ring attention took {t:,.3f} ms, **{ratio_words(r['speedup'])}** one "
                f"rank computing the whole S x S block at once{' (masked, not skipped)' if r['causal'] else ''}; "
                f"splitting the work over {n} ranks allows at most {bound:.2f}x there")
        if r["speedup"] > bound * (1 + OVER_BOUND):
            text += (", so part of that ratio comes from the size of the blocks, not from the parallelism; this "
                     "record predates the fair one-rank peer (the same blocks on one rank, those above the "
                     "diagonal skipped), which `course-kit bench parallel` now times")
        return text + f" (float32 check within {r['max_rel_err_fp32']:.1e})"
    bound, share = r["bound"], r["speedup"] / r["bound"]
    busiest, total = r.get("busiest_blocks"), r.get("baseline_blocks")
    why = (f"the busiest rank computes {busiest} of the {total} blocks" if busiest and total
           else f"{n} ranks share the blocks")
    text = (f"over {n} ranks ({kind}) ring attention runs **{ratio_words(r['speedup'])}** one rank running the "
            f"same {r['baseline_chunks']} x {r['baseline_chunks']} blocks with the same kernel"
            f"{', those above the diagonal skipped' if r['causal'] else ''} ({t:,.3f} against "
            f"{r['baseline_s'] * 1e3:,.3f} ms). The split allows at most **{bound:.2f}x** ({why})")
    if r["speedup"] > bound * (1 + OVER_BOUND):
        text += (f", and this run measured more than that: besides the split, something differs between the "
                 f"two runs that this record does not show")
    else:
        text += (f": this run reached **{share:.0%}** of it; the split of the work does not account for the rest "
                 f"(the ring also passes K/V between its steps; this record does not separate that from other costs)")
    if r.get("whole_block_s"):
        text += (f". One rank computing the whole S x S block at once{' (masked)' if r['causal'] else ''} takes "
                 f"{r['whole_block_s'] * 1e3:,.3f} ms, {speed(r['whole_block_s'], r['baseline_s'])} in blocks"
                 f"{' with those above the diagonal skipped' if r['causal'] else ''}: a ring compared with that "
                 f"one-block peer would count this difference as parallelism")
    return text + f" (float32 check within {r['max_rel_err_fp32']:.1e})"
