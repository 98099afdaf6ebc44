"""The Triton decode step (course_kit/cuda_graphs/decode_kernels, notebook 05), each kernel against an oracle.

On a CPU the kernels run in Triton's interpreter on tiny shapes: the matrix-vector kernel against a
float64 product of the eager step's own operations (RMSNorm module, F.silu), RoPE and the K/V append
against `apply_rope` and the cache writes of `model.decode`, the argmax against torch.argmax, and the
whole step against `model.decode`. On a GPU: the step in bf16 and fp32, with PDL, graph-captured,
against the model's own step and HF transformers.
"""
import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton")

from course_kit.cuda_graphs import runner as cg
from course_kit.cuda_graphs.explain import explain_hbm, explain_kernels, forms_table, serial_profile
from course_kit.cuda_graphs.decode_kernels import argmax, gemv as G, qkv_rope as QR, step as S
from course_kit.models import llama  # noqa: E402
from course_kit.models.hf import model_to_hf

BF16_ULP = 2.0 ** -7   # relative spacing of bf16 numbers near 1


def _rel(got, want):
    return ((got.double() - want.double()).abs().max() / want.double().abs().max()).item()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 3])
def test_gemv_every_prologue_against_float64(dtype, rows):
    g = torch.Generator().manual_seed(rows)
    n, k = 40, 96                                        # neither a multiple of the blocks below
    w = torch.randn(n, k, generator=g).to(dtype)
    x = torch.randn(rows, k, generator=g).to(dtype)
    gate_up = torch.randn(rows, 2 * k, generator=g).to(dtype)
    res = torch.randn(rows, n, generator=g).to(dtype)
    norm = llama.RMSNorm(k, 1e-5)
    norm.weight.data = (torch.rand(k, generator=g) + 0.5).to(dtype)
    tol = 1e-6 if dtype == torch.float32 else 2 * BF16_ULP
    blocks = (8, 32)
    wd = w.double()
    # the oracle forms each input as the eager step does (in `dtype`), then multiplies in float64
    assert _rel(G.gemv(w, x, blocks=blocks), x.double() @ wd.T) < tol
    assert _rel(G.gemv(w, x, prologue="norm", norm_weight=norm.weight.data, blocks=blocks),
                norm.to(dtype)(x).double() @ wd.T) < tol
    act = (F.silu(gate_up[:, :k]) * gate_up[:, k:]).double()
    assert _rel(G.gemv(w, gate_up, prologue="swiglu", residual=res, blocks=blocks),
                act @ wd.T + res.double()) < tol


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("block_n", [2, 8, 32])
def test_gemv_swiglu_epilogue_is_the_eager_activation(dtype, block_n):
    """w13's store forms silu(gate) * up (pairs j, j + N/2 in one program): against float64 of the
    eager step's own operations, and bitwise the product followed by the activation in w2's load."""
    g = torch.Generator().manual_seed(block_n)
    w13, x = torch.randn(2 * 40, 96, generator=g).to(dtype), torch.randn(3, 96, generator=g).to(dtype)
    h = G.gemv(w13, x, epilogue="swiglu", blocks=(block_n, 32))
    gate, up = F.linear(x, w13).split(40, dim=-1)                 # rounded to dtype, as the eager step
    want = F.silu(gate).double() * up.double()
    tol = 1e-6 if dtype == torch.float32 else 2 * BF16_ULP
    assert h.shape == (3, 40) and _rel(h, want) < tol
    y = G.gemv(w13, x, blocks=(block_n, 32))                    # the same activation, formed on load
    assert torch.equal(h, G.gemv(torch.eye(40, dtype=dtype), y, prologue="swiglu", blocks=(8, 32)))
    with pytest.raises(ValueError, match="even number of rows"):
        G.gemv(w13[:-1], x, epilogue="swiglu")
    with pytest.raises(ValueError, match="BLOCK_N must be even"):
        G.gemv(w13, x, epilogue="swiglu", blocks=(1, 32))
    with pytest.raises(ValueError, match="epilogue must be"):
        G.gemv(w13, x, epilogue="gelu")


def test_gemv_updates_the_residual_stream_in_place_and_uses_its_own_blocks():
    g = torch.Generator().manual_seed(0)
    w, x, r = torch.randn(64, 48, generator=g), torch.randn(2, 48, generator=g), torch.randn(2, 64, generator=g)
    want = x @ w.T + r
    out = G.gemv(w, x, residual=r, out=r)                 # default blocks: gemv_blocks
    assert out is r
    torch.testing.assert_close(r, want, rtol=1e-5, atol=1e-5)


def test_gemv_names_the_bad_value():
    w, x = torch.zeros(8, 16), torch.zeros(1, 16)
    with pytest.raises(ValueError, match="prologue must be one of"):
        G.gemv(w, x, prologue="gelu")
    with pytest.raises(ValueError, match=r"x must be \[M, 32\]"):
        G.gemv(w, x, prologue="swiglu")
    with pytest.raises(ValueError, match=r"9 rows is outside \[1, 8\]"):
        G.gemv(w, torch.zeros(9, 16))
    with pytest.raises(ValueError, match="needs norm_weight"):
        G.gemv(w, x, prologue="norm")
    with pytest.raises(ValueError, match=r"residual must be \[1, 8\]"):
        G.gemv(w, x, residual=torch.zeros(1, 9))
    with pytest.raises(ValueError, match="positive"):
        G.gemv_blocks(0, 16, 132)


def test_gemv_blocks_fill_every_sm_and_give_the_shapes_measured_best_on_the_h200():
    for n, k in [(3072, 2048), (16384, 2048), (2048, 8192), (128256, 2048), (960, 576), (64, 64)]:
        bn, bk = G.gemv_blocks(n, k, 132)
        assert bn & (bn - 1) == 0 and bk & (bk - 1) == 0 and 2 <= bn <= 64
        assert bk <= max(128, 2 * k) and bn * bk <= max(G.TILE, 128 * bn)
        if n >= 2 * 132 * G.PROGRAMS_PER_SM:
            assert -(-n // bn) >= 132 * G.PROGRAMS_PER_SM        # every SM gets PROGRAMS_PER_SM programs
    # llama-1b's products: the blocks that won inside the whole step (logs/decode-probe-*-s8.json)
    assert [G.gemv_blocks(n, k, 132) for n, k in [(3072, 2048), (2048, 2048), (16384, 2048), (2048, 8192),
                                                  (128256, 2048)]] == [(4, 2048), (4, 2048), (32, 256), (4, 2048),
                                                                       (64, 128)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("block_n", [2, 8, 32])     # 32: one program's pairs span two heads (D = 16)
def test_qkv_rope_is_norm_product_rope_and_the_cache_writes(dtype, block_n):
    cfg = llama.ModelConfig.from_preset("tiny")
    g = torch.Generator().manual_seed(1)
    H, KV, D = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    wqkv = (torch.randn((H + 2 * KV) * D, cfg.dim, generator=g) * 0.1).to(dtype)
    x, norm_w = torch.randn(2, cfg.dim, generator=g).to(dtype), torch.randn(cfg.dim, generator=g).to(dtype)
    positions = torch.tensor([3, 17])
    inv_freq = llama.rope_inv_freq(cfg)
    k_cache, v_cache = torch.zeros(3, KV, 32, D, dtype=dtype), torch.zeros(3, KV, 32, D, dtype=dtype)
    q_rot = QR.qkv_rope(wqkv, x, norm_w, 1e-5, positions, inv_freq, k_cache, v_cache, H, blocks=(block_n, 32))
    # the eager step's arithmetic: RMSNorm, the product, split, RoPE
    normed = llama.RMSNorm(cfg.dim, 1e-5).to(dtype)
    normed.weight.data.copy_(norm_w)
    q, k, v = F.linear(normed(x), wqkv).split([H * D, KV * D, KV * D], dim=-1)
    angles = positions.float()[:, None] * inv_freq
    cos, sin = angles.cos()[:, None, :].to(dtype), angles.sin()[:, None, :].to(dtype)
    # cos and sin in float32 may differ in the last bit between Triton and torch; and Triton's
    # interpreter rounds float32 to bf16 toward zero where the GPU rounds to nearest: a bf16 ulp
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2 * BF16_ULP, atol=4 * BF16_ULP)
    torch.testing.assert_close(q_rot, llama.apply_rope(q.view(2, H, D), cos, sin), **tol)
    k_want = llama.apply_rope(k.view(2, KV, D), cos, sin)
    for row, p in enumerate(positions.tolist()):
        torch.testing.assert_close(k_cache[row, :, p], k_want[row], **tol)
        torch.testing.assert_close(v_cache[row, :, p], v.view(2, KV, D)[row], **tol)
    assert k_cache[2].abs().sum() == 0 and k_cache[0, :, :3].abs().sum() == 0   # nothing else written
    with pytest.raises(ValueError, match="x must be a contiguous"):
        QR.qkv_rope(wqkv, x[:, :-1], norm_w, 1e-5, positions, inv_freq, k_cache, v_cache, H)
    with pytest.raises(ValueError, match="BLOCK_N must be even"):
        QR.qkv_rope(wqkv, x, norm_w, 1e-5, positions, inv_freq, k_cache, v_cache, H, blocks=(3, 32))
    with pytest.raises(ValueError, match="rows"):
        QR.qkv_rope(wqkv[:-D], x, norm_w, 1e-5, positions, inv_freq, k_cache, v_cache, H)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_argmax_in_the_products_store_is_torch_argmax_of_its_output(dtype):
    g = torch.Generator().manual_seed(2)
    w, x = torch.randn(1000, 64, generator=g).to(dtype), torch.randn(3, 64, generator=g).to(dtype)
    w[700] = w[300] = w[5] * 0 + 3.0                                # rows 300 and 700 tie in every row of x
    x[1] = w[300].abs()                                            # ... and win in row 1: the first one counts
    vals, idx = G.argmax_buffers(w, 3)
    logits = G.gemv(w, x, argmax_into=(vals, idx))
    assert argmax.tokens_from_blocks(vals, idx).tolist() == logits.argmax(-1).tolist()
    assert logits.argmax(-1)[1] == 300
    with pytest.raises(ValueError, match="argmax_into must be"):
        G.gemv(w, x, argmax_into=(vals[:, :-1], idx[:, :-1]))


def test_step_greedy_uses_the_logits_products_maxima_only_for_its_own_untouched_logits():
    model = llama.Transformer.from_preset("tiny", seed=0, dtype=torch.float32)
    cache = llama.StaticKVCache(model.config, 2, 32, torch.float32)
    model.prefill(torch.tensor([[5, 6, 7], [8, 9, 10]]), cache)
    step = S.TritonDecodeStep(model)
    logits = step(torch.tensor([3, 4]), torch.tensor([3, 3]), cache)
    assert step.greedy(logits).tolist() == logits.argmax(-1).tolist()
    logits[:, logits.argmax(-1)] = -1e9                               # a banned token: changed in place
    assert step.greedy(logits).tolist() == logits.argmax(-1).tolist()
    out = torch.zeros(2, dtype=torch.long)
    assert step.greedy(logits.clone(), out=out) is out and out.tolist() == logits.argmax(-1).tolist()
    with torch.inference_mode():      # inference tensors keep no version count: the two-kernel path
        logits = step(torch.tensor([3, 4]), torch.tensor([4, 4]), cache)
        logits[:, logits.argmax(-1)] = -1e9
        assert step.greedy(logits).tolist() == logits.argmax(-1).tolist()


def test_greedy_tokens_is_torch_argmax_ties_included():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 2500, generator=g).to(torch.bfloat16)      # 2500: not a multiple of BLOCK
    logits[1, 2499] = 40.0
    logits[2, 7] = logits[2, 1500] = 40.0                              # a tie: the first index wins
    logits[0, :1024] = float("-inf")
    assert argmax.greedy_tokens(logits).tolist() == logits.argmax(-1).tolist()
    with pytest.raises(ValueError, match="contiguous along vocab"):
        argmax.greedy_tokens(logits.T)


@pytest.fixture(scope="module")
def tiny():
    return llama.Transformer.from_preset("tiny", seed=0)


def test_triton_step_is_model_decode_with_context_slices(tiny):
    """Two rows at different positions; a 200-position cache is cut into several slices, so the
    merge of the attention's slices runs too."""
    caches = [llama.StaticKVCache(tiny.config, 2, 200) for _ in range(2)]
    prompts = torch.tensor([[5, 6, 7, 8, 9, 10], [11, 12, 13, 14, 15, 16]])
    for c in caches:
        tiny.prefill(prompts, c)
    tokens, positions = torch.tensor([3, 4]), torch.tensor([6, 2])
    want = tiny.decode(tokens, positions, caches[0])
    got = S.TritonDecodeStep(tiny)(tokens, positions, caches[1])
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(caches[1].k, caches[0].k, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(caches[1].v, caches[0].v, rtol=1e-6, atol=1e-6)   # v: a product, summed in another order


def test_runner_with_triton_kernels_gives_the_eager_tokens(tiny):
    prompts = [[1, 2, 3, 4, 5]]
    want = cg.eager_generate(tiny, prompts, 4, max_seq=64, max_batch=1)
    runner = cg.DecodeGraphRunner(tiny, 1, 64, kernels="triton", verbose=False)
    assert runner.generate(prompts, 4) == want
    with pytest.raises(ValueError, match="kernels must be one of"):
        cg.DecodeGraphRunner(tiny, 1, 64, kernels="cuda", verbose=False)
    with pytest.raises(ValueError, match="choose one"):
        cg.DecodeGraphRunner(tiny, 1, 64, kernels="triton", fuse=True, verbose=False)
    with pytest.raises(ValueError, match="at most 8 rows"):
        cg.DecodeGraphRunner(tiny, 16, 64, kernels="triton", verbose=False)
    with pytest.raises(ValueError, match="pdl=True needs"):
        S.TritonDecodeStep(tiny, pdl=True)


def test_triton_step_on_tensor_parallel_shards_is_the_unsharded_step():
    """Two ranks (gloo, the interpreter): each runs the Triton step on its shard; the row-parallel
    products are summed by all-reduce (rank 0 carrying the residual) and the vocabulary gathered."""
    from course_kit.parallel import launcher, tp_llama
    for r in launcher.get_pool(2, "gloo").run(tp_llama.check_tp_triton_step):
        assert r["logits_err"] < 1e-5, r
        assert r["tokens"] == r["want"]


# ----------------------------------------------------------------------------- the record's words

def _forms_record(pdl_ms: float) -> tuple[dict, list[dict]]:
    nbytes = 2.6e9
    rows = [{"preset": "llama-1b", "variant": v, "batch": 1, "ms_per_step": ms, "bytes_per_token": nbytes}
            for v, ms in (("graph", 2.3), ("fused_graph", 1.23), ("triton_graph", 1.0), ("triton_graph_pdl", pdl_ms))]
    serial = {"kernels_per_step": 107, "gpu_us_per_step": 950.0,
              "top": [{"kernel": "_gemv_kernel", "calls_per_step": 65, "us_per_step": 800.0},
                      {"kernel": "_paged_decode_kernel", "calls_per_step": 16, "us_per_step": 52.0},
                      {"kernel": "_merge_splits_kernel", "calls_per_step": 16, "us_per_step": 22.0},
                      {"kernel": "_rope_append_kernel", "calls_per_step": 16, "us_per_step": 32.0}]}
    overlapped = {"kernels_per_step": 107, "gpu_us_per_step": 1900.0, "top": serial["top"]}
    best = min(rows, key=lambda r: r["ms_per_step"])["variant"]
    s = {"copy_gbs": 4260.0, "hbm_variant": best, "big_ms_per_token": min(r["ms_per_step"] for r in rows),
         "hbm_gbs": 2800.0, "hbm_fraction": 0.66,
         "big_profiles": {"graph": {"kernels_per_step": 413}, "fused_graph": {"kernels_per_step": 253},
                          "triton_graph": serial, "triton_graph_pdl": overlapped}}
    s["profile_big_b1"] = s["big_profiles"][best]
    return s, rows


def test_explain_kernels_walks_the_forms_and_breaks_down_the_serial_profile():
    s, rows = _forms_record(pdl_ms=0.9)
    text = explain_kernels(s, rows)
    assert "1.87x faster than the form before" in text          # Inductor: 2.3 -> 1.23 ms
    assert "1.23x faster than the form before" in text          # Triton: 1.23 -> 1.0 ms
    assert "1.11x faster than the form before" in text          # PDL: 1.0 -> 0.9 ms
    assert "in 107 kernels" in text and "changed the step by -100 µs" in text
    assert serial_profile(s)[0] == "triton_graph"
    table = forms_table(s, rows)
    assert [t["ms_per_token"] for t in table] == [2.3, 1.23, 1.0, 0.9]
    assert table[2]["gpu_busy_us"] == 950.0 and table[3]["gpu_busy_us"] is None     # overlapped under PDL
    assert table[3]["kernels"] == 107 and table[0]["gbs"] is None
    hbm = explain_hbm(s, rows)
    assert "Profiled without PDL" in hbm and "1900" not in hbm
    assert "the PDL step, 900 µs, is 1.06x faster than that sum" in hbm and "would reach" not in hbm
    # the time kernel by kind, from the serial profile; no norms or adds: they are folded in
    assert "Matrix multiplies (from the top kernels only): 65 kernels, 800 µs" in hbm
    assert "(attention 74 µs, RoPE and the K/V append 32 µs: about 42 kernels)" in hbm


def test_explain_kernels_says_slower_when_pdl_is_slower():
    s, rows = _forms_record(pdl_ms=1.05)
    text = explain_kernels(s, rows)
    assert "1.05x slower than the form before" in text
    assert "changed the step" not in text                                   # the best form has no PDL
    hbm = explain_hbm(s, rows)
    assert "Profiled without PDL" not in hbm and "launch gaps are not the limit" in hbm
    assert explain_kernels({}, []) == "no llama-1b decode forms in this record"


# ----------------------------------------------------------------------------- on the GPU

@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gpu_triton_step_matches_model_decode(dtype):
    model = llama.Transformer.from_preset("smollm-135m", seed=0, dtype=dtype, device="cuda")
    caches = [llama.StaticKVCache(model.config, 2, 256, dtype, "cuda") for _ in range(2)]
    prompt = torch.randint(1, 1000, (2, 40), generator=torch.Generator().manual_seed(0)).cuda()
    for c in caches:
        model.prefill(prompt, c)
    tokens, positions = torch.tensor([5, 6], device="cuda"), torch.tensor([40, 33], device="cuda")
    want = model.decode(tokens, positions, caches[0]).float()
    got = S.TritonDecodeStep(model)(tokens, positions, caches[1]).float()
    assert _rel(got, want) < (1e-5 if dtype == torch.float32 else 3e-2)


@pytest.mark.gpu
def test_gpu_triton_runner_gives_hf_greedy_tokens_in_fp32():
    from course_kit.benchmarks.batching import hf_generate_greedy
    model = llama.Transformer.from_preset("smollm-135m", seed=0, dtype=torch.float32, device="cuda")
    hf = model_to_hf(model)
    prompts = [torch.randint(1, 40000, (n,), generator=torch.Generator().manual_seed(n)).tolist() for n in (7, 20)]
    runner = cg.DecodeGraphRunner(model, 2, 128, kernels="triton", verbose=False)
    assert runner.use_graphs
    assert runner.generate(prompts, 24) == [hf_generate_greedy(hf, p, 24) for p in prompts]


def test_constants_sets_knobs_for_a_run_and_puts_them_back():
    from course_kit.cuda_graphs.decode_kernels import constants, gemv, step
    tile, splits = gemv.TILE, getattr(step, "SPLITS", None)
    with pytest.raises(RuntimeError):
        with constants({"TILE": 4096}, gemv, step):
            assert gemv.TILE == 4096
            raise RuntimeError("a variant that fails")
    assert gemv.TILE == tile and getattr(step, "SPLITS", None) == splits     # restored all the same
    with pytest.raises(AttributeError, match="TLIE"):                         # a typo is an error
        with constants({"TLIE": 4096}, gemv):
            pass
