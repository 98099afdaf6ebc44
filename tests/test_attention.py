"""Naive, online-softmax and tiled attention against float64 references and torch's SDPA."""
import math

import pytest
import torch
import torch.nn.functional as F

from course_kit.attention import (attention_flops, blockwise_softmax, naive_attention, online_softmax_row,
                                  online_softmax_update, peak_memory, reference_attention, tiled_attention,
                                  tiled_block_step)


def _qkv(b, hq, hkv, sq, sk, d, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, hq, sq, d, generator=g, dtype=torch.float64).to(dtype)
    k = torch.randn(b, hkv, sk, d, generator=g, dtype=torch.float64).to(dtype)
    v = torch.randn(b, hkv, sk, d, generator=g, dtype=torch.float64).to(dtype)
    return q, k, v


def test_online_softmax_row_matches_softmax_and_tracks_running_max():
    x = torch.tensor([1.0, 3.0, -2.0, 5.0, 5.0, 0.5], dtype=torch.float64)
    probs, history = online_softmax_row(x)
    torch.testing.assert_close(probs, torch.softmax(x, 0), rtol=0, atol=1e-15)
    assert [m for m, _ in history] == [1.0, 3.0, 3.0, 5.0, 5.0, 5.0]
    # the final running sum is the denominator relative to the final max
    assert history[-1][1] == pytest.approx(torch.exp(x - 5.0).sum().item(), rel=1e-14)
    with pytest.raises(ValueError, match="empty"):
        online_softmax_row([])


@pytest.mark.parametrize("block", [1, 7, 64, 1000])
def test_blockwise_softmax_matches_softmax_with_large_logits(block):
    x = torch.randn(4, 3, 129, dtype=torch.float64) * 50 + 300   # exp() would overflow without the max
    torch.testing.assert_close(blockwise_softmax(x, block), torch.softmax(x, -1), rtol=1e-12, atol=1e-14)


def test_online_update_handles_fully_masked_first_block():
    m = torch.full((2,), float("-inf"), dtype=torch.float64)
    l = torch.zeros(2, dtype=torch.float64)
    m, l = online_softmax_update(m, l, torch.full((2, 3), float("-inf"), dtype=torch.float64))
    assert torch.isinf(m).all() and (l == 0).all()
    m, l = online_softmax_update(m, l, torch.tensor([[0.0, 1.0], [2.0, 2.0]], dtype=torch.float64))
    torch.testing.assert_close(l, torch.tensor([math.exp(-1) + 1, 2.0], dtype=torch.float64))


@pytest.mark.parametrize("causal", [False, True])
def test_naive_matches_sdpa_with_gqa(causal):
    q, k, v = _qkv(2, 4, 2, 37, 37, 16)
    ref = F.scaled_dot_product_attention(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), is_causal=causal)
    torch.testing.assert_close(naive_attention(q, k, v, causal=causal), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("seed", range(6))
def test_tiled_matches_float64_and_sdpa_on_random_shapes(seed):
    rng = torch.Generator().manual_seed(100 + seed)
    r = lambda lo, hi: int(torch.randint(lo, hi + 1, (1,), generator=rng))  # noqa: E731
    hkv = r(1, 2)
    hq = hkv * r(1, 3)
    sq = r(1, 90)
    sk = sq if seed % 2 else r(1, 90)
    causal = seed % 3 != 0
    q, k, v = _qkv(r(1, 2), hq, hkv, sq, sk, 8 * r(1, 4), seed=seed)
    out = tiled_attention(q, k, v, causal=causal, block_m=r(4, 40), block_n=r(4, 40))
    torch.testing.assert_close(out.double(), reference_attention(q, k, v, causal=causal), rtol=1e-5, atol=1e-5)
    sdpa = F.scaled_dot_product_attention(q, k.repeat_interleave(hq // hkv, 1), v.repeat_interleave(hq // hkv, 1),
                                          is_causal=causal)
    torch.testing.assert_close(out, sdpa, rtol=1e-5, atol=1e-5)


def test_tiled_block_step_one_block_equals_softmax_times_v():
    q, k, v = _qkv(1, 1, 1, 8, 8, 4, dtype=torch.float64)
    m = torch.full((1, 1, 8), float("-inf"), dtype=torch.float64)
    l = torch.zeros((1, 1, 8), dtype=torch.float64)
    acc = torch.zeros((1, 1, 8, 4), dtype=torch.float64)
    m, l, acc = tiled_block_step(q, k[:, :, :5], v[:, :, :5], m, l, acc, 0.5)
    m, l, acc = tiled_block_step(q, k[:, :, 5:], v[:, :, 5:], m, l, acc, 0.5)
    torch.testing.assert_close(acc / l.unsqueeze(-1), naive_attention(q, k, v, scale=0.5))


def test_errors_name_the_bad_value():
    q, k, v = _qkv(1, 3, 2, 4, 4, 8)
    with pytest.raises(ValueError, match="multiple of key/value heads"):
        naive_attention(q, k, v)
    with pytest.raises(ValueError, match="block_m"):
        tiled_attention(q, q, q, block_m=0)


def test_flops_count_causal_as_half():
    assert attention_flops(4, 16, 4096, 4096, 128, causal=False) == 4 * 4 * 16 * 4096 * 4096 * 128
    assert attention_flops(1, 1, 10, 10, 8, causal=True) == 2 * 10 * 10 * 8


def test_naive_memory_grows_quadratically_and_tiled_does_not():
    def mem(fn, s):
        q, k, v = _qkv(1, 2, 2, s, s, 32)
        return peak_memory(lambda: fn(q, k, v))
    naive_small, naive_big = mem(naive_attention, 128), mem(naive_attention, 512)
    # 4x the length: the S^2 score and probability tensors (2 * 4 * H * S^2 bytes) dominate
    assert naive_big >= 2 * 4 * 2 * 512 * 512
    assert naive_big / naive_small > 8
    tiled = mem(lambda q, k, v: tiled_attention(q, k, v, block_m=128, block_n=128), 512)
    assert tiled < naive_big / 4


def test_plots_build_from_bench_rows():
    from course_kit.plots import attention as pa
    probs, hist = online_softmax_row([1.0, 3.0, 2.0])
    assert len(pa.online_softmax_figure([1.0, 3.0, 2.0], hist).data) == 3
    tiles = pa.causal_tiles_figure(300, 128, 64)
    z = tiles.data[0].z
    assert len(z) == 3 and len(z[0]) == 5 and z[0][2] == 0 and z[2][0] == 1 and z[2][4] == 2
    shape = {"batch": 1, "heads": 2, "seq_len": 256, "head_dim": 128, "causal": True}
    rows = [{"variant": v, **shape, "median_s": t, "tflops": 1 / t, "peak_bytes": 2**20 * t, "intensity": 10.0}
            for v, t in (("naive", 2.0), ("sdpa flash", 1.0))]
    assert len(pa.time_memory_figure(rows).data) == 4
    assert len(pa.tflops_figure(rows, shape, peak_tflops=5.0).data) == 1
    assert len(pa.roofline_points(rows, shape)) == 2
    from course_kit import device
    fig = pa.attention_roofline(rows, shape, peaks=device.peaks("NVIDIA H200"))
    assert fig is not None and len(fig.data) >= 3
