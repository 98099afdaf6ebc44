"""CUDA graph runner: graph choice and padding on CPU; replay == eager decode on the GPU."""
import pytest
import torch

from course_kit.cuda_graphs import pitfalls, runner as cg
from course_kit.models import llama


def test_capture_sizes_are_powers_of_two_up_to_max():
    assert cg.capture_sizes(8) == [1, 2, 4, 8]
    assert cg.capture_sizes(6) == [1, 2, 4, 6]
    assert cg.capture_sizes(1) == [1]
    with pytest.raises(ValueError, match=">= 1"):
        cg.capture_sizes(0)


def test_pick_graph_and_padding_plan():
    sizes = [1, 2, 4, 8]
    assert [cg.pick_graph(b, sizes) for b in (1, 2, 3, 5, 8)] == [1, 2, 4, 8, 8]
    plan = cg.padding_plan([3, 7], sizes)
    assert plan == [{"batch": 3, "graph": 4, "padding": 1, "wasted": 0.25},
                    {"batch": 7, "graph": 8, "padding": 1, "wasted": 0.125}]
    with pytest.raises(ValueError, match=r"\[1, 8\]"):
        cg.pick_graph(9, sizes)
    with pytest.raises(ValueError, match=r"\[1, 8\]"):
        cg.pick_graph(0, sizes)


@pytest.fixture(scope="module")
def tiny():
    return llama.Transformer.from_preset("tiny", seed=0)


def test_cpu_runner_falls_back_to_eager_and_matches_generate(tiny, capsys):
    runner = cg.DecodeGraphRunner(tiny, max_batch=4, max_seq=64)
    assert "CUDA graphs need a CUDA GPU" in capsys.readouterr().out
    assert not runner.use_graphs and runner.sizes == [1, 2, 4]
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, 256, (n,), generator=g).tolist() for n in (3, 11, 6)]  # 3 rows: pads to 4
    assert runner.generate(prompts, 12) == llama.generate(tiny, prompts, 12)


def test_sampling_runner_is_seeded(tiny):
    prompts = [[1, 2, 3], [4, 5]]
    runs = [cg.DecodeGraphRunner(tiny, 2, 32, temperature=1.0, top_k=20, seed=s, verbose=False).generate(prompts, 10)
            for s in (3, 3, 4)]
    assert runs[0] == runs[1] and runs[0] != runs[2]


def test_fused_blocks_compile_once_per_size_and_keep_the_tokens(tiny):
    from torch._dynamo.utils import counters
    prompts = [[1, 2, 3, 4], [5, 6, 7], [9]]
    want = cg.DecodeGraphRunner(tiny, 4, 32, verbose=False).generate(prompts, 6)
    before = counters["stats"]["unique_graphs"]
    try:
        got = cg.DecodeGraphRunner(tiny, 4, 32, verbose=False, fuse="aot_eager").generate(prompts, 6)
    finally:
        cg.fuse_layers(tiny, enable=False)
    assert got == want
    # one graph for the padded size 4 serves both layers; prefill ran eagerly (no graph for it)
    if hasattr(torch.compiler, "set_stance"):  # torch >= 2.6 keeps prefill eager
        assert counters["stats"]["unique_graphs"] - before == 1


def test_runner_rejects_bad_sizes_and_prompts(tiny):
    with pytest.raises(ValueError, match="max_batch=2"):
        cg.DecodeGraphRunner(tiny, max_batch=2, sizes=[1, 4], verbose=False)
    runner = cg.DecodeGraphRunner(tiny, max_batch=2, max_seq=16, verbose=False)
    with pytest.raises(ValueError, match="max_seq 16"):
        runner.generate([[1] * 10], 10)
    with pytest.raises(ValueError, match=r"\[1, 2\]"):
        runner.generate([[1], [2], [3]], 2)


def test_launch_overhead_and_pitfalls_on_cpu():
    out = cg.launch_overhead(n_kernels=50, repeat=3, device="cpu")
    assert out["eager_us_per_kernel"] > 0 and out["ratio"] is None
    if not torch.cuda.is_available():
        notes = pitfalls.run_pitfalls()
        assert [p["pitfall"] for p in notes] == ["CPU sync inside capture", "dynamic shapes",
                                                 "allocation during capture", "RNG"]


@pytest.mark.gpu
@pytest.mark.parametrize("batch", [1, 3, 8])
def test_graph_replay_gives_the_same_greedy_tokens_as_eager(batch):
    model = llama.Transformer.from_preset("smollm-135m", seed=0, dtype=torch.bfloat16, device="cuda")
    g = torch.Generator().manual_seed(batch)
    prompts = [torch.randint(0, 49152, (int(n),), generator=g).tolist()
               for n in torch.randint(4, 60, (batch,), generator=g)]
    runner = cg.DecodeGraphRunner(model, max_batch=8, max_seq=256)
    assert runner.use_graphs and sorted(runner.graphs) == [1, 2, 4, 8]
    graph_tokens = runner.generate(prompts, 32)
    assert graph_tokens == cg.eager_generate(model, prompts, 32, max_seq=256, max_batch=8)


@pytest.mark.gpu
def test_pitfalls_each_show_their_failure():
    found = {p["pitfall"]: p for p in pitfalls.run_pitfalls()}
    assert found["CPU sync inside capture"]["error"]
    for name in ("dynamic shapes", "allocation during capture", "RNG"):
        assert found[name]["wrong"] is True, found[name]


@pytest.mark.gpu
def test_launch_ratio_and_reduce_overhead_step_agree_with_eager():
    assert cg.launch_overhead(n_kernels=200, repeat=5)["ratio"] > 1
    model = llama.Transformer.from_preset("tiny", seed=0, dtype=torch.bfloat16, device="cuda")
    cache = llama.StaticKVCache(model.config, 2, 32, torch.bfloat16, "cuda")
    tokens, pos = torch.tensor([5, 6], device="cuda"), torch.tensor([0, 0], device="cuda")
    step = cg.reduce_overhead_step(model, cache)
    with torch.no_grad():
        for _ in range(3):
            got = step(tokens, pos).float().clone()
        want = model.decode(tokens, pos, cache).float()
    assert ((got - want).norm() / want.norm()).item() < 2e-2


def _decode_record(with_profiles: bool = True) -> tuple[dict, list[dict]]:
    rows = [{"preset": "smollm-135m", "variant": v, "batch": 1, "ms_per_step": ms}
            for v, ms in (("graph", 3.0), ("fused_graph", 1.0), ("reduce_overhead", 2.5))]
    rows.append({"preset": "llama-1b", "variant": "fused_graph", "batch": 1, "ms_per_step": 1.25,
                 "bytes_per_token": 2.5e9})
    s = {"decode_bytes": {"preset": "smollm-135m"}, "runner_variant": "fused_graph",
         "reduce_overhead_vs_runner": 0.4, "targets": {"reduce_overhead_within": 0.15, "hbm_fraction": 0.6},
         "hbm_variant": "fused_graph", "hbm_gbs": 2000.0, "hbm_fraction": 0.47, "copy_gbs": 4250.0,
         "big_ms_per_token": 1.25,
         "profile_fused_graph_b1": {"kernels_per_step": 444, "gpu_us_per_step": 900.0, "top": []},
         "profile_big_b1": {"kernels_per_step": 265, "gpu_us_per_step": 1150.0,
                            "top": [{"kernel": "nvjet_sm90_tst_128x8", "calls_per_step": 16, "us_per_step": 300.0},
                                    {"kernel": "fmha_cutlassF_bf16", "calls_per_step": 16, "us_per_step": 50.0},
                                    {"kernel": "triton_poi_fused_add", "calls_per_step": 32, "us_per_step": 40.0}]}}
    if with_profiles:
        s["profile_reduce_overhead_b1"] = {"kernels_per_step": 900, "gpu_us_per_step": 1500.0, "top": []}
        s["profile_big_b1"].update(gemm_us_per_step=850.0, gemm_kernels_per_step=80)
    return s, rows


def test_decode_explanations_state_the_ratio_and_split_the_time():
    from course_kit.cuda_graphs.explain import explain_hbm, explain_reduce_overhead, gemm_split, is_gemm
    assert is_gemm("nvjet_sm90_tst_64x8_64x16_4x1_v_bx_splitK_TNT") and not is_gemm("fmha_cutlassF_bf16")
    s, rows = _decode_record()
    ro = explain_reduce_overhead(s, rows)
    assert "2.50x slower than the runner" in ro and "/ tokens/s" in ro
    assert "1.20x faster than it" in ro                  # 2.5 ms against the unfused graph's 3.0 ms
    assert not any(w in ro.lower() for w in ("target", "missed", "met "))
    # gap 1500 µs: 600 µs more kernel time, and 1000-900=100 vs 2500-1500=1000 idle: 900 µs more idle
    assert "600 µs is extra GPU kernel time" in ro and "900 µs is more time the GPU sits idle" in ro
    hbm = explain_hbm(s, rows)
    assert "92% busy" in hbm and "47%" in hbm
    assert not any(w in hbm.lower() for w in ("target", "missed", "met)"))
    assert "80 kernels, 850 µs" in hbm and "185 kernels" in hbm
    # Older records: top kernels only, no reduce-overhead profile; attention is not a matmul.
    s, rows = _decode_record(with_profiles=False)
    assert gemm_split(s["profile_big_b1"]) == {"gemm_us": 300.0, "gemm_kernels": 16, "other_us": 850.0,
                                               "other_kernels": 249, "complete": False}
    assert "top kernels only" in explain_hbm(s, rows)
    assert "no profile of the reduce-overhead step" in explain_reduce_overhead(s, rows)
    assert "no reduce-overhead" in explain_reduce_overhead({}, [])


def test_reduce_overhead_ratio_words_follow_the_direction():
    from course_kit.cuda_graphs.explain import explain_reduce_overhead
    s, rows = _decode_record()
    s["reduce_overhead_vs_runner"] = 1.25
    assert "1.25x faster than the runner" in explain_reduce_overhead(s, rows)
    s["reduce_overhead_vs_runner"] = 0.99
    assert "about as fast as" in explain_reduce_overhead(s, rows)


def test_live_reduce_overhead_compares_like_with_like():
    """Issue 19 item 5: the live 1.188 ms step is compared with the live graph runner (2.600 ms), the
    recorded 2.703 ms with the recorded graph runner (3.071 ms); the two runs are labelled apart."""
    from course_kit.cuda_graphs.explain import explain_reduce_overhead_live
    text = explain_reduce_overhead_live(1.188, 2.600, 2.703, 3.071, gpu="NVIDIA H200")
    assert text.startswith("This run (live), batch 1: reduce-overhead 1.188 ms")
    assert "2.19x faster than it" in text and "Recorded on NVIDIA H200" in text
    assert "1.14x faster than it" in text and "2.28x faster than the recorded one" in text
    slow = explain_reduce_overhead_live(3.0, 2.0)
    assert "1.50x slower than it" in slow and "Recorded" not in slow
    same = explain_reduce_overhead_live(2.7, 2.0, 2.703, 3.071)
    assert "recorded one" not in same                     # about the same as the record: nothing to say
    assert not any(w in (text + slow).lower() for w in ("target", "missed"))
    with pytest.raises(ValueError, match="live_ro_ms=0"):
        explain_reduce_overhead_live(0, 1.0)


def test_first_error_of_a_failed_capture_is_the_one_reported():
    """Issue 19 item 15: the sync's own error, not the secondary one raised when the capture ends."""
    def capture_like():
        try:
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing\nmore")
        finally:
            raise RuntimeError("CUDA error: operation failed due to a previous error during capture")
    with pytest.raises(RuntimeError) as info:
        capture_like()
    first, then = pitfalls.first_error(info.value)
    assert first == "RuntimeError: CUDA error: operation not permitted when stream is capturing"
    assert then == "RuntimeError: CUDA error: operation failed due to a previous error during capture"
    assert pitfalls.first_error(ValueError("alone")) == ("ValueError: alone", None)
