"""EP and CP as the parallel bench measures them (gloo, 2 ranks): checked against one process."""
import torch
import torch.nn.functional as F

from course_kit.parallel import launcher, measure_ep_cp


def _rings_agree(rank, world_size):
    from course_kit.parallel import context, measure_ep_cp as m
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 16 * world_size, 8) for _ in range(3))
    lo, hi = rank * 16, (rank + 1) * 16
    out = {}
    for causal in (False, True):
        a, na = context.ring_attention(q[:, :, lo:hi], k[:, :, lo:hi], v[:, :, lo:hi], causal)
        b, nb = m.ring_attention_batched(q[:, :, lo:hi], k[:, :, lo:hi], v[:, :, lo:hi], causal)
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)[:, :, lo:hi]
        out[causal] = (float((a - b).abs().max()), na == nb, float((b - ref).abs().max()))
    return out


def test_batched_ring_equals_the_lesson_ring_and_sdpa():
    for r in launcher.launch(_rings_agree, 2, backend="gloo"):
        for diff, same_blocks, err in r.values():
            assert diff == 0.0 and same_blocks and err < 1e-5


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
