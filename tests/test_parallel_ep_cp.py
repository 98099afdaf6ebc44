"""EP and CP as the parallel bench measures them (gloo, 2 ranks): checked against one process."""
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
