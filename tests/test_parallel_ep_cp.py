"""EP and CP as the parallel bench measures them (gloo, 2 ranks): checked against one process."""
import pytest
import torch
import torch.nn.functional as F

from course_kit.parallel import launcher, measure_ep_cp


def _ring_against_sdpa(rank, world_size):
    from course_kit.parallel import context
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 16 * world_size, 8) for _ in range(3))
    lo, hi = rank * 16, (rank + 1) * 16
    out = {}
    for causal in (False, True):
        got, blocks = context.ring_attention(q[:, :, lo:hi], k[:, :, lo:hi], v[:, :, lo:hi], causal)
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)[:, :, lo:hi]
        out[causal] = (float((got - ref).abs().max()), blocks)
    return out


def test_the_ring_with_batched_sends_equals_sdpa():
    """The lesson's ring (each step's send and receive posted as one batch, as NCCL needs) on gloo."""
    results = launcher.launch(_ring_against_sdpa, 2, backend="gloo")
    for rank, r in enumerate(results):
        for causal, (err, blocks) in r.items():
            assert err < 1e-5
            assert blocks == (rank + 1 if causal else 2)      # causal: only blocks at or left of the diagonal


def test_ep_and_cp_rows_check_before_they_time():
    ep = launcher.launch(measure_ep_cp.ep_on_rank, 2, hidden=32, ffn=64, n_experts=4, top_k=2,
                         tokens_per_rank=16, dtype="float32", warmup=1, repeat=2, backend="gloo")
    assert ep[0]["max_rel_err_fp32"] < 1e-5 and ep[0]["median_s"] > 0 and ep[0]["experts_per_rank"] == 2
    cp = launcher.launch(measure_ep_cp.cp_on_rank, 2, batch=1, heads=2, seq=64, head_dim=8,
                         dtype="float32", check_seq=16, warmup=1, repeat=2, backend="gloo")
    rows = {r["causal"]: r for r in cp[1]}
    assert all(r["max_rel_err_fp32"] < 1e-5 for r in rows.values())
    assert rows[False]["blocks"] == 2 and rows[True]["blocks"] == 2     # the last rank sees every block
    assert {r["blocks"] for r in cp[0] if r["causal"]} == {1}           # the first only its own


# ---- the fair one-rank peer of ring attention, and what the block split allows (issue 41 item 7) ----

def test_blockwise_attention_is_attention_and_counts_its_blocks():
    from course_kit.parallel import context
    torch.manual_seed(1)
    q, k, v = (torch.randn(1, 2, 48, 8, dtype=torch.float64) for _ in range(3))
    for causal in (False, True):
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        for c in (1, 2, 3, 4):
            out, blocks = context.blockwise_attention(q, k, v, causal, c)
            assert torch.allclose(out, ref, atol=1e-12)
            assert blocks == (c * (c + 1) // 2 if causal else c * c)
    with pytest.raises(ValueError, match="divides the sequence"):
        context.blockwise_attention(q, k, v, True, 5)


def test_speedup_bound_is_the_ratio_of_score_elements():
    """The bound counts score elements: one rank's blocks of (S/c)^2 against the busiest ring rank's n
    blocks of (S/n)^2 (the block counts blockwise_attention and ring_attention report)."""
    from fractions import Fraction
    from course_kit.parallel import context
    for n in (2, 3, 4, 8):
        for causal in (False, True):
            for c in (1, n):
                one_rank = Fraction(c * (c + 1) // 2 if causal else c * c, c * c)   # in S^2
                busiest = Fraction(n, n * n)                                       # the last rank: n blocks
                assert context.speedup_bound(n, causal, c) == pytest.approx(float(one_rank / busiest))
    assert context.speedup_bound(2, True, 2) == 1.5 and context.speedup_bound(2, False, 2) == 2.0
    assert context.speedup_bound(2, True, 1) == 2.0          # the old whole-block peer: n, masked or not
    assert context.speedup_bound(8, True, 8) == 4.5


def test_the_bench_rows_name_the_fair_peer_and_the_busiest_rank():
    cp = launcher.launch(measure_ep_cp.cp_on_rank, 2, batch=1, heads=2, seq=64, head_dim=8,
                         dtype="float32", check_seq=16, warmup=1, repeat=2, backend="gloo")
    assert {(r["causal"], r["busiest_blocks"]) for r in cp[0]} == {(False, 2), (True, 2)}
    one = launcher.launch(measure_ep_cp.cp_on_rank, 1, batch=1, heads=2, seq=64, head_dim=8, dtype="float32",
                          check_seq=16, warmup=1, repeat=2, baseline_chunks=[2], backend="gloo")[0]
    peers = {(r["causal"], r.get("chunks")): r for r in one}
    assert peers[(True, 2)]["baseline"] == "blockwise" and peers[(True, 2)]["blocks"] == 3
    assert peers[(False, 2)]["blocks"] == 4 and peers[(True, 1)]["blocks"] == 1
    assert all(r["max_rel_err_fp32"] < 1e-5 for r in one)


def _cp_row(speedup, causal=True, old=False):
    row = {"name": "ring_attention", "n": 2, "causal": causal, "median_s": 0.004, "max_rel_err_fp32": 1e-7,
           "speedup": speedup, "blocks": 1}
    if not old:
        row.update(bound=1.5 if causal else 2.0, baseline_chunks=2, baseline_s=0.004 * speedup,
                   busiest_blocks=2, baseline_blocks=3 if causal else 4, whole_block_s=0.0096,
                   speedup_whole_block=2.4)
    return row


def test_explain_cp_never_claims_more_than_the_split_allows():
    from course_kit.parallel import explain
    under = explain.explain_cp_row(_cp_row(1.35))
    assert "1.35x faster than** one rank running the same 2 x 2 blocks" in under
    assert "at most **1.50x**" in under and "**90%** of it" in under and "busiest rank computes 2 of the 3 blocks" in under
    assert "takes 9.600 ms, 1.78x slower than in blocks with those above the diagonal skipped" in under
    over = explain.explain_cp_row(_cp_row(1.8))
    assert "measured more than that" in over and "% of it" not in over
    flat = explain.explain_cp_row(_cp_row(1.9, causal=False))
    assert "at most **2.00x**" in flat and "**95%**" in flat and "diagonal" not in flat
    # the old record (H200x2, 2.53x against one whole masked S x S block): not presented as the split's
    old = explain.explain_cp_row(_cp_row(2.53, old=True))
    assert "at most 2.00x there" in old and "size of the blocks, not from the parallelism" in old
    fine = explain.explain_cp_row(_cp_row(1.9, old=True))
    assert "size of the blocks" not in fine
    rec = {"results": [_cp_row(1.35), {"name": "ring_attention", "n": 1, "causal": True, "speedup": 1.0}]}
    text = explain.explain_ep_cp_speed(rec, "the record", "ring_attention")
    assert text.startswith("On the record: over 2 ranks (causal)") and text.count("over ") == 1
