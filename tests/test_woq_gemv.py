"""The weight-only int8/int4 products (decode_kernels/woq_gemv.py, issue 48) against the fp32 matmul
of the dequantised weights, in Triton's interpreter on a CPU (tiny shapes, few programs: the
interpreter runs each program in Python) and on a GPU.

The dequantised weights come from dtypes/woq.py's own quantisers (the values torch's peers take),
never from this module's unpacking, so a wrong packing, a wrong plane order or a wrong dequantising
formula all fail here.
"""
import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton")

from course_kit.cuda_graphs.decode_kernels import argmax, qkv_rope as QR, woq_gemv as W  # noqa: E402
from course_kit.dtypes import woq  # noqa: E402
from course_kit.models import llama  # noqa: E402

BF16_ULP = 2.0 ** -7


def _rel(got, want):
    return ((got.double() - want.double()).abs().max() / want.double().abs().max()).item()


def _weights(fmt, n, k, gs=128, seed=0):
    """(packed weight, its dequantised fp32 weights as woq.py computes them)."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=g) * torch.logspace(-1, 0.3, n)[:, None]   # rows of different scales
    if fmt == "int8":
        q, s = woq.quantize_int8(w)
        return W.pack_int8(q, s), woq.dequantize_int8(q, s)
    q, sz = woq.quantize_int4(w, gs)
    return W.pack_int4(q, sz, gs), woq.dequantize_int4(q, sz.to(torch.bfloat16), gs)


# (format, group size, N, K, blocks): K ragged against the load (int8: 100 is no multiple of the
# 128-column block; int4: 3 or 5 groups in loads of 2 or 4), N ragged against BLOCK_N
CASES = [("int8", 128, 40, 100, (16, 1)), ("int8", 128, 24, 300, (8, 2)),
         ("int4", 32, 40, 96, (16, 2)), ("int4", 64, 24, 320, (16, 4)), ("int4", 128, 20, 384, (8, 2))]


@pytest.mark.parametrize("fmt,gs,n,k,blocks", CASES)
def test_product_is_the_fp32_matmul_of_the_dequantised_weights(fmt, gs, n, k, blocks):
    qw, deq = _weights(fmt, n, k, gs)
    assert torch.equal(W.dequantise(qw), deq)                 # the packing keeps every value
    x = torch.randn(2, k, generator=torch.Generator().manual_seed(1))
    y = W.woq_gemv(qw, x, blocks=blocks)
    assert y.shape == (2, n) and _rel(y, x.double() @ deq.double().T) < 1e-5


def test_the_same_weights_feed_torchs_own_weight_only_kernels():
    """woq.py's (q, scales) go to torch's CPU kernels and, packed, to ours: the same products, up to
    bf16 output rounding (and torch's bf16 int8 scales)."""
    g = torch.Generator().manual_seed(8)
    w, x = torch.randn(48, 256, generator=g) * 0.05, torch.randn(2, 256, generator=g).to(torch.bfloat16)
    q4, sz = woq.quantize_int4(w, 64)
    peer4, _ = woq.int4_weight_only_mm(x, woq.pack_int4(q4, "cpu"), sz, 64)
    assert _rel(W.woq_gemv(W.pack_int4(q4, sz, 64), x, blocks=(16, 4)), peer4) < 2 * BF16_ULP
    q8, s8 = woq.quantize_int8(w)
    peer8, _ = woq.int8_weight_only_mm(x, q8, s8)
    assert _rel(W.woq_gemv(W.pack_int8(q8, s8), x, blocks=(16, 2)), peer8) < 2 * BF16_ULP


def test_one_wrong_code_or_scale_changes_the_result():
    """The check can fail: a code moved to another plane, or another group's scale, is seen."""
    qw, deq = _weights("int4", 16, 64, 32)
    x = torch.randn(1, 64, generator=torch.Generator().manual_seed(2))
    good = W.woq_gemv(qw, x, blocks=(16, 2))
    words = qw.words.clone()
    words[3, 1] ^= 0x5 << 12                                   # row 3, one code of plane 3
    bad = W.woq_gemv(W.QuantWeight("int4", words, qw.scales, 16, 64, 32), x, blocks=(16, 2))
    assert torch.equal(bad[:, :3], good[:, :3]) and not torch.equal(bad[:, 3], good[:, 3])
    scales = qw.scales.clone()
    scales[5, 1] = scales[5, 0]
    bad = W.woq_gemv(W.QuantWeight("int4", qw.words, scales, 16, 64, 32), x, blocks=(16, 2))
    assert not torch.equal(bad[:, 5], good[:, 5])


def test_bf16_activations_round_the_output_as_f_linear():
    qw, deq = _weights("int8", 40, 256)
    x = torch.randn(1, 256, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
    y = W.woq_gemv(qw, x, blocks=(16, 2))
    assert y.dtype == torch.bfloat16 and _rel(y, x.double() @ deq.double().T) < 2 * BF16_ULP


@pytest.mark.parametrize("fmt,gs", [("int8", 128), ("int4", 32)])
def test_the_layers_small_operations_ride_along(fmt, gs):
    """RMSNorm in the load of x, SwiGLU in the load and in the store, the residual add: each against
    the eager step's own operations in float64 on the dequantised weights."""
    g = torch.Generator().manual_seed(4)
    n, k = 24, 64
    qw, deq = _weights(fmt, n, k, gs)
    x, res = torch.randn(2, k, generator=g), torch.randn(2, n, generator=g)
    norm = llama.RMSNorm(k, 1e-5)
    norm.weight.data = torch.rand(k, generator=g) + 0.5
    d = deq.double()
    got = W.woq_gemv(qw, x, prologue="norm", norm_weight=norm.weight.data, blocks=(8, 2))
    assert _rel(got, norm(x).double() @ d.T) < 1e-5
    gate_up = torch.randn(2, 2 * k, generator=g)
    act = (F.silu(gate_up[:, :k]) * gate_up[:, k:]).double()
    out = res.clone()
    assert W.woq_gemv(qw, gate_up, prologue="swiglu", residual=out, out=out, blocks=(8, 2)) is out
    assert _rel(out, act @ d.T + res.double()) < 1e-5
    h = W.woq_gemv(qw, x, epilogue="swiglu", blocks=(8, 2))             # rows j and j + 12: gate, up
    y = x.double() @ d.T
    assert h.shape == (2, 12) and _rel(h, F.silu(y[:, :12]) * y[:, 12:]) < 1e-5


def test_argmax_in_the_store_is_torch_argmax():
    qw, _ = _weights("int4", 300, 64, 64)
    x = torch.randn(3, 64, generator=torch.Generator().manual_seed(5))
    vals, idx = W.argmax_buffers(qw, 3)
    logits = W.woq_gemv(qw, x, argmax_into=(vals, idx))
    assert argmax.tokens_from_blocks(vals, idx).tolist() == logits.argmax(-1).tolist()
    with pytest.raises(ValueError, match="argmax_into must be"):
        W.woq_gemv(qw, x, argmax_into=(vals[:, :-1], idx[:, :-1]))


@pytest.mark.parametrize("fmt", ["int8", "int4"])
def test_qkv_rope_on_packed_weights_is_the_bf16_kernel_on_the_dequantised_ones(fmt):
    """The q/k/v product with RoPE and the K/V append: against qkv_rope.qkv_rope (itself checked
    against the eager step) on the dequantised weights; blocks whose pairs span two heads."""
    cfg = llama.ModelConfig.from_preset("tiny")
    H, KV, D = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    qw, deq = _weights(fmt, (H + 2 * KV) * D, cfg.dim, 32, seed=6)
    g = torch.Generator().manual_seed(7)
    x, norm_w = torch.randn(2, cfg.dim, generator=g), torch.rand(cfg.dim, generator=g) + 0.5
    positions, inv_freq = torch.tensor([3, 17]), llama.rope_inv_freq(cfg)
    caches = [(torch.zeros(2, KV, 24, D), torch.zeros(2, KV, 24, D)) for _ in range(2)]
    want = QR.qkv_rope(deq, x, norm_w, 1e-5, positions, inv_freq, *caches[0], H, blocks=(32, 64))
    got = W.woq_qkv_rope(qw, x, norm_w, 1e-5, positions, inv_freq, *caches[1], H, blocks=(32, 2))
    # float32 sums in another order (per group, then scaled): relative to the largest value
    assert _rel(got, want) < 1e-5
    assert _rel(caches[1][0], caches[0][0]) < 1e-5 and _rel(caches[1][1], caches[0][1]) < 1e-5
    assert caches[1][0][:, :, 4:17].abs().sum() == 0                  # only the rows' positions written
    with pytest.raises(ValueError, match="rows"):
        W.woq_qkv_rope(W.pack_int8(*woq.quantize_int8(deq[:-D])), x, norm_w, 1e-5, positions, inv_freq,
                       *caches[1], H)


def test_blocks_fill_every_sm_and_load_whole_groups_up_to_16_kib():
    for fmt, gs in (("int8", 128), ("int4", 128), ("int4", 32)):
        for n, k in [(3072, 2048), (16384, 2048), (2048, 8192), (128256, 2048), (28672, 4096), (40, 96)]:
            if k % gs:
                continue
            bn, groups = W.woq_blocks(n, k, fmt, gs, 132)
            assert bn & (bn - 1) == 0 and groups & (groups - 1) == 0 and 2 <= bn <= 64
            assert bn * groups * gs * W.BITS[fmt] // 8 <= max(W.TILE_BYTES, bn * gs * W.BITS[fmt] // 8)
            assert groups * gs < 2 * k                                   # at most the row, rounded up
            if n >= 2 * 132 * W.PROGRAMS_PER_SM:
                assert -(-n // bn) >= 132 * W.PROGRAMS_PER_SM
    # llama-1b's q/k/v in int4: 768 programs of 4 rows, the whole row (16 groups, 4 KiB) in one load
    assert W.woq_blocks(3072, 2048, "int4", 128, 132) == (4, 16)


def test_bad_inputs_name_the_bad_value():
    qw, _ = _weights("int8", 8, 64)
    x = torch.zeros(1, 64)
    with pytest.raises(ValueError, match="prologue must be one of"):
        W.woq_gemv(qw, x, prologue="gelu")
    with pytest.raises(ValueError, match=r"x must be a contiguous \[M, 128\]"):
        W.woq_gemv(qw, x, prologue="swiglu")
    with pytest.raises(ValueError, match=r"9 rows is outside \[1, 8\]"):
        W.woq_gemv(qw, torch.zeros(9, 64))
    with pytest.raises(ValueError, match="needs norm_weight"):
        W.woq_gemv(qw, x, prologue="norm")
    with pytest.raises(ValueError, match="powers of two"):
        W.woq_gemv(qw, x, blocks=(8, 3))
    with pytest.raises(ValueError, match="must be one of"):
        W.quantise(torch.zeros(4, 64), "fp8")
    with pytest.raises(ValueError, match="0..15"):
        W.pack_int4(torch.full((4, 32), 16), torch.zeros(1, 4, 2), 32)
    with pytest.raises(ValueError, match="group_size"):
        W.pack_int4(torch.zeros(4, 48, dtype=torch.int32), torch.zeros(1, 4, 2), 32)


def test_the_int4_product_compiles_for_hopper_with_one_lop3_per_code_and_no_conversion():
    """The sm_90 build (on any machine; the interpreter cannot see it): llama-1b's MLP-down product in
    int4 fits its registers without spilling, forms each weight with one mask-and-or (LOP3) per
    multiply-add (FFMA), not two, and converts no integer to float (I2F runs at a quarter rate)."""
    from pathlib import Path
    from course_kit.cuda_graphs.decode_kernels.woq_hopper import _tool, compile_for_hopper
    if not (Path(_tool("nvdisasm")).is_file() and Path(_tool("cuobjdump")).is_file()):
        pytest.skip("this Triton ships no nvdisasm/cuobjdump")
    got = compile_for_hopper("int4", 2048, 8192)
    sass = got["sass"]
    assert got["registers"] <= 255 and got["stack"] == 0, got
    assert sass["FFMA"] >= 512 and sass["LOP3"] <= 1.0 * sass["FFMA"], sass   # 8 codes x 32 words x 2 copies
    assert not any(op.startswith("I2F") for op in sass), sass
    with pytest.raises(ValueError, match="fmt must be one of"):
        compile_for_hopper("fp8")


# ----------------------------------------------------------------------------- on the GPU

@pytest.mark.gpu
@pytest.mark.parametrize("fmt", ["int8", "int4"])
def test_gpu_products_at_llama_1b_shapes_with_pdl(fmt):
    """llama-1b's q/k/v and MLP-down products in bf16 on the H200's default blocks (PDL where the GPU
    has it), against the fp32 matmul of the dequantised weights, and as fast to read as a test can say:
    correct on every program of a 132-SM launch."""
    from course_kit.cuda_graphs.decode_kernels.step import pdl_supported
    pdl = pdl_supported(torch.device("cuda"))
    for n, k in [(3072, 2048), (2048, 8192)]:
        qw, deq = _weights(fmt, n, k, 128)
        qw = qw.to("cuda")
        x = torch.randn(1, k, device="cuda").to(torch.bfloat16)
        y = W.woq_gemv(qw, x, pdl=pdl)
        assert _rel(y.cpu(), x.cpu().double() @ deq.double().T) < 2 * BF16_ULP
