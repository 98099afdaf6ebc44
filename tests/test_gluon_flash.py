"""The Gluon flash-attention forward (gluon_flash.py): compiled for sm_90 on any machine, checked
against float64 on a Hopper GPU, and the fallback to the Triton kernel everywhere else.

Gluon has no CPU interpreter, so on a CPU the kernel is compiled, not run: Triton's own ptxas
builds the sm_90 binary, and the test reads the compiler's account of it (the Hopper instructions
that carry the kernel's structure, and that it fits in shared memory).
"""

import pytest
import torch

pytest.importorskip("triton")

from course_kit.attention import reference_attention  # noqa: E402  (sets TRITON_INTERPRET first)
from course_kit.attention import gluon_flash, gluon_hopper  # noqa: E402
from course_kit.attention.naive import reference_lse  # noqa: E402

needs_gluon = pytest.mark.skipif(not gluon_flash.HAS_GLUON, reason="this Triton has no Gluon (Triton >= 3.5)")
HOPPER_SHARED_BYTES = 232448        # the most shared memory one program may have on an H100/H200 (227 KB)
TOL = {torch.bfloat16: 3e-2, torch.float16: 5e-3}


@needs_gluon
@pytest.mark.parametrize("head_dim,causal,pingpong,q_buffers", [(128, True, True, 2), (64, False, False, 1)])
def test_the_kernel_compiles_for_hopper_with_its_three_roles(head_dim, causal, pingpong, q_buffers):
    got = gluon_hopper.compile_for_hopper(head_dim, causal, pingpong, q_buffers)
    counts = got["ptx_counts"]
    assert got["threads"] == 384, got                 # a loading warp (padded to a warpgroup) + two of 4 warps
    assert got["shared_bytes"] <= HOPPER_SHARED_BYTES, got
    assert counts["setmaxnreg"] > 0, got              # registers handed from the loader to the computing roles
    assert counts["cp.async.bulk.tensor"] > 0, got    # TMA
    assert counts["wgmma.mma_async"] > 0, got         # Hopper's tensor-core instruction
    assert counts["mbarrier.try_wait"] > 0, got       # the roles meet only at barriers


@needs_gluon
def test_pingpong_adds_the_turn_barriers_and_nothing_else():
    plain, turns = (gluon_hopper.compile_for_hopper(128, True, pp, 2) for pp in (False, True))
    assert turns["ptx_counts"]["mbarrier.try_wait"] > plain["ptx_counts"]["mbarrier.try_wait"]
    # two 8-byte barriers and their alignment, no tile: a K/V or Q tile alone is 16-32 KB
    assert turns["shared_bytes"] - plain["shared_bytes"] <= 128


def test_usable_says_why_not_here_and_errors_name_the_bad_value():
    q = torch.randn(1, 2, 128, 64, dtype=torch.bfloat16)
    usable, why = gluon_flash.gluon_usable(q, q, q)
    if not torch.cuda.is_available():
        assert not usable and ("sm_90" in why or "Gluon" in why)
        with pytest.raises(ValueError, match="cannot run here"):
            gluon_flash.gluon_flash_attention(q, q, q)
    with pytest.raises(ValueError, match="head_dim must be one of"):
        gluon_hopper.compile_for_hopper(head_dim=96)
    with pytest.raises(ValueError, match="q_buffers must be 1 or 2"):
        gluon_hopper.compile_for_hopper(q_buffers=3)


def test_attention_falls_back_to_the_triton_kernel_where_gluon_cannot_run():
    # on a CPU (the interpreter) and, on a GPU, for a ragged length the Gluon kernel does not take
    device = "cuda" if torch.cuda.is_available() else "cpu"
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 77, 64, generator=g).to(torch.bfloat16).to(device) for _ in range(3))
    assert not gluon_flash.gluon_usable(q, k, v)[0]
    out = gluon_flash.attention(q, k, v, causal=True)
    err = (out.double().cpu() - reference_attention(q, k, v, causal=True)).abs().max().item()
    assert err <= TOL[torch.bfloat16], err


def _check(b, hq, hkv, s, d, dtype, causal, **kw):
    g = torch.Generator(device="cuda").manual_seed(b * 1000 + s + d)
    q = torch.randn(b, hq, s, d, generator=g, device="cuda", dtype=dtype)
    k, v = (torch.randn(b, hkv, s, d, generator=g, device="cuda", dtype=dtype) for _ in range(2))
    out, lse = gluon_flash.gluon_flash_attention(q, k, v, causal=causal, **kw)
    ref = reference_attention(q, k, v, causal=causal)
    err = (out.double().cpu() - ref).abs().max().item()
    assert err <= TOL[dtype], (err, kw)
    # the log-sum-exp a backward pass needs, against float64's
    assert (lse.double().cpu() - reference_lse(q, k, causal=causal)).abs().max().item() < 1e-3


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1, 2, 2, 128, 64), (2, 4, 4, 384, 128), (1, 8, 2, 512, 128), (2, 16, 16, 1024, 128),
                                   (1, 32, 8, 2048, 64)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("causal", [False, True])
def test_gpu_gluon_forward_against_float64(shape, dtype, causal):
    if not gluon_flash.runs_here(torch.device("cuda"), dtype):
        pytest.skip("the Gluon kernel needs an sm_90 GPU and a Triton with Gluon")
    _check(*shape, dtype, causal)


@pytest.mark.gpu
@pytest.mark.parametrize("pingpong", [False, True])
@pytest.mark.parametrize("q_buffers", [1, 2])
@pytest.mark.parametrize("programs", [1, 7, 1 << 30])      # one program walks all items, a few do, one an item
@pytest.mark.parametrize("snake", [False, True])
def test_gpu_every_schedule_gives_the_same_answer(pingpong, q_buffers, programs, snake):
    if not gluon_flash.runs_here(torch.device("cuda"), torch.bfloat16):
        pytest.skip("the Gluon kernel needs an sm_90 GPU and a Triton with Gluon")
    # 40 items over 7 programs: the sixth round is a short one, taken backwards in snake order
    _check(2, 4, 2, 640, 128, torch.bfloat16, True, pingpong=pingpong, q_buffers=q_buffers, programs=programs,
           snake=snake)


@pytest.mark.parametrize("n_items,programs", [(40, 7), (2048, 132), (5, 5), (3, 8), (1, 1)])
def test_persistent_order_gives_every_item_once_and_one_round_stays_in_order(n_items, programs):
    for snake in (False, True):
        order = gluon_flash.persistent_order(n_items, programs, snake)
        assert sorted(order) == list(range(n_items))
        for slot, item in enumerate(order):      # a slot's item is in the slot's round
            assert item // programs == slot // programs
    if n_items <= programs:                      # one program an item: snake order changes nothing
        assert gluon_flash.persistent_order(n_items, programs) == list(range(n_items))
    with pytest.raises(ValueError, match="programs must be >= 1"):
        gluon_flash.persistent_order(n_items, 0)


def test_snake_order_evens_out_the_causal_work_of_persistent_programs():
    # the acceptance shape (B4 H16 S4096) on an H200's 132 SMs: round-robin leaves the slowest program
    # with a ninth more K/V tiles than the mean; snake order only the last round's rounding (16 rounds
    # for 2048 / 132 = 15.5 items a program)
    def slowest_over_mean(snake, causal=True):
        work = gluon_flash.program_key_blocks(4096, 64, 132, causal, snake)
        assert sum(work) == 64 * (32 * 33 // 2 if causal else 32 * 32)     # every tile once
        return max(work) / (sum(work) / len(work))
    assert slowest_over_mean(snake=False) > 1.1
    assert slowest_over_mean(snake=True) == pytest.approx(16 / 15.515, abs=1e-3)
    assert slowest_over_mean(snake=True, causal=False) == slowest_over_mean(snake=False, causal=False)


def test_attention_falls_back_for_good_when_the_gluon_kernel_fails(monkeypatch):
    # a Gluon older than the kernel fails to compile: `attention` says why and uses the Triton kernel
    def broken(*args, **kwargs):
        raise RuntimeError("this Gluon has no warp_specialize of that shape")
    monkeypatch.setattr(gluon_flash, "gluon_usable", lambda q, k, v: (True, "ok"))
    monkeypatch.setattr(gluon_flash, "gluon_flash_attention", broken)
    monkeypatch.setattr(gluon_flash, "gluon_failed", None)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    q = torch.randn(1, 2, 64, 32).to(torch.float16).to(device)
    out = gluon_flash.attention(q, q, q, causal=True)
    assert "warp_specialize" in gluon_flash.gluon_failed
    assert (out.double().cpu() - reference_attention(q, q, q, causal=True)).abs().max().item() <= TOL[torch.float16]
    with pytest.raises(ValueError, match="scale must be > 0"):     # a bad argument is still refused
        gluon_flash.attention(q, q, q, scale=-1.0)


def test_the_program_count_is_the_one_measured_faster():
    import time
    slow = {132: 2e-3, 1 << 30: 1e-4}          # seconds a launch takes with that many programs
    assert gluon_flash._faster(lambda n: time.sleep(slow[n]), (132, 1 << 30), torch.device("cpu")) == 1 << 30
    slow = {132: 1e-4, 1 << 30: 2e-3}
    assert gluon_flash._faster(lambda n: time.sleep(slow[n]), (132, 1 << 30), torch.device("cpu")) == 132


@needs_gluon
def test_descriptors_share_the_tile_layout_built_once(monkeypatch):
    # at short lengths a call's time is the host's: the four descriptors of a call must not each
    # work out the same shared-memory layout again (a CPU tensor stands in: only shape and dtype matter)
    built = []
    real = gluon_flash.gl.NVMMASharedLayout.get_default_for
    monkeypatch.setattr(gluon_flash.gl.NVMMASharedLayout, "get_default_for",
                        lambda *a, **kw: built.append(a) or real(*a, **kw))
    gluon_flash._tile_layout.cache_clear()
    q, k = torch.empty(2, 4, 256, 128, dtype=torch.bfloat16), torch.empty(2, 2, 256, 128, dtype=torch.bfloat16)
    for _ in range(3):
        descs = [gluon_flash._descriptor(q, gluon_flash.BLOCK_M // 2), gluon_flash._descriptor(k, gluon_flash.BLOCK_N),
                 gluon_flash._descriptor(k, gluon_flash.BLOCK_N), gluon_flash._descriptor(q, gluon_flash.BLOCK_M // 2)]
    assert len(built) == 2                          # one per tile shape, not one per descriptor and call
    assert descs[0].layout is descs[3].layout and descs[1].layout is descs[2].layout
    assert descs[0].layout == real([gluon_flash.BLOCK_M // 2, 128], gluon_flash.gl.bfloat16)
    assert descs[1].block_shape == [gluon_flash.BLOCK_N, 128] and descs[1].shape == [2 * 2 * 256, 128]
