"""Weight-only int8/int4 matmuls against the fp32 matmul of the dequantised weights (issue 20)."""
from __future__ import annotations

import pytest
import torch

from course_kit.dtypes import woq


def _data(m=8, n=64, k=256, seed=0):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=g) * torch.logspace(-1, 0.5, n)[:, None]
    x = torch.randn(m, k, generator=g)
    return x, w


def _rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def test_int8_weight_only_matches_dequantised_fp32():
    x, w = _data()
    q, s = woq.quantize_int8(w)
    assert q.dtype == torch.int8 and q.abs().max() <= 127
    y, path = woq.int8_weight_only_mm(x.to(torch.bfloat16), q, s)
    ref = x.to(torch.bfloat16).double() @ woq.dequantize_int8(q, s).double().T
    assert path == "aten._weight_int8pack_mm"
    assert _rel(y, ref) < 1e-2                                  # bf16 output rounding
    assert _rel(woq.dequantize_int8(q, s), w) < 1e-2            # quantisation error itself is small


@pytest.mark.parametrize("gs", [32, 64, 128])
def test_int4_weight_only_matches_dequantised_fp32(gs):
    x, w = _data()
    q, sz = woq.quantize_int4(w, gs)
    assert q.min() >= 0 and q.max() <= 15 and sz.shape == (256 // gs, 64, 2)
    deq = woq.dequantize_int4(q, sz, gs)
    assert _rel(deq, w) < 0.12                                  # 4 bits: ~1/16 of each group's range
    y, path = woq.int4_weight_only_mm(x.to(torch.bfloat16), woq.pack_int4(q, "cpu"), sz, gs)
    ref = x.to(torch.bfloat16).double() @ woq.dequantize_int4(q, sz.to(torch.bfloat16), gs).double().T
    assert path.startswith("aten._weight_int4pack_mm")
    assert _rel(y, ref) < 1e-2
    # one wrong code changes the result: the check can fail
    q2 = q.clone()
    q2[0, 0] = (q2[0, 0] + 5) % 16
    y2, _ = woq.int4_weight_only_mm(x.to(torch.bfloat16), woq.pack_int4(q2, "cpu"), sz, gs)
    assert not torch.equal(y2[:, 0], y[:, 0])


def test_weight_bytes_and_bad_input():
    assert woq.weight_bytes(8192, 8192, "bf16") == 2 * 8192**2
    assert woq.weight_bytes(8192, 8192, "int4", 128) < woq.weight_bytes(8192, 8192, "int8") / 1.8   # scales and zeros cost ~6%
    with pytest.raises(ValueError, match="group_size"):
        woq.quantize_int4(torch.randn(4, 100), 64)
    with pytest.raises(ValueError, match="2-D"):
        woq.quantize_int8(torch.randn(4))
    with pytest.raises(ValueError, match="unknown kind"):
        woq.weight_bytes(4, 4, "fp8")


def test_bench_weight_only_rows_on_cpu():
    from course_kit.benchmarks import dtypes as bd
    rows = bd.weight_only("cpu", 64, m=4, repeat=2)
    by = {r["kind"]: r for r in rows}
    assert set(by) == {"bf16", "int8", "int4"} and by["int4"]["group_size"] == 64
    for r in rows:
        assert r["median_s"] > 0 and r["rel_error_vs_dequantised"] <= bd.WO_TOLERANCE
    assert by["int4"]["weight_bytes"] < by["int8"]["weight_bytes"] < by["bf16"]["weight_bytes"]
    s = bd.summarise_weight_only(rows)
    assert s["int4_weight_only_speedup_vs_bf16"] == pytest.approx(by["bf16"]["median_s"] / by["int4"]["median_s"])
    assert "skipped" in bd.weight_only("cpu", 48, m=2, repeat=1)[2]      # no group size divides 48


@pytest.mark.gpu
def test_weight_only_kernels_on_cuda_match_the_dequantised_weights():
    x, w = _data(m=16, n=256, k=512)
    xb = x.to("cuda", torch.bfloat16)
    q, s = woq.quantize_int8(w)
    y8, _ = woq.int8_weight_only_mm(xb, q.cuda(), s.cuda())
    assert _rel(y8.cpu(), xb.cpu().double() @ woq.dequantize_int8(q, s).double().T) < 1e-2
    q4, sz = woq.quantize_int4(w, 128)
    y4, path = woq.int4_weight_only_mm(xb, woq.pack_int4(q4, "cuda"), sz, 128)
    ref = xb.cpu().double() @ woq.dequantize_int4(q4, sz.to(torch.bfloat16), 128).double().T
    assert path == "aten._weight_int4pack_mm" and _rel(y4.cpu(), ref) < 1e-2
