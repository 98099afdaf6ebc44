"""course_kit.compile_modes on CPU: mode names, graph breaks, recompiles, generated C++ code and
fusion, the decode/training workloads; GPU tests (marked gpu) check reduce-overhead and profiling."""
import pytest
import torch

from course_kit import compile_modes as cm
from course_kit.compile_modes import graphs, workloads
from course_kit.models import tiny_gpt
from course_kit import benchmarks


@pytest.fixture(autouse=True)
def fresh_dynamo():
    yield
    torch._dynamo.reset()


def test_bad_mode_lists_valid_modes():
    with pytest.raises(ValueError) as e:
        cm.compile_with_mode(torch.relu, "turbo")
    for m in cm.MODES:
        assert m in str(e.value)
    with pytest.raises(ValueError, match="reduce-overhead"):
        cm.measure_modes(torch.relu, [(torch.ones(2),)], modes=["eager", "fast"])
    with pytest.raises(ValueError, match="mark_dynamic"):
        cm.count_compiles(torch.relu, [(2,)], dynamic="sometimes")


def test_eager_is_the_function_itself():
    assert cm.compile_with_mode(torch.relu, "eager") is torch.relu


def test_graph_breaks_reported_by_explain():
    x, w = torch.randn(8, 16), torch.randn(16, 32)
    clean = cm.graph_report(graphs.mlp_block, x)
    assert clean["graphs"] == 1 and clean["graph_breaks"] == 0 and clean["ops"] > 0
    r = cm.graph_report(graphs.forward_with_print, x, w)
    assert r["graph_breaks"] >= 1 and r["graphs"] == r["graph_breaks"] + 1
    assert len(r["break_reasons"]) == r["graph_breaks"]
    r2 = cm.graph_report(graphs.forward_with_branch, x, w)
    assert r2["graph_breaks"] >= 2


def test_fullgraph_detects_breaks():
    x, w = torch.randn(8, 16), torch.randn(16, 32)
    ok, err = cm.compiles_fullgraph(graphs.forward_with_branch, x, w)
    assert not ok and err
    assert cm.compiles_fullgraph(graphs.mlp_block, x) == (True, "")


def test_recompiles_per_dynamic_choice():
    shapes = [(8, 16), (12, 16), (20, 16), (33, 16)]
    got = {d: cm.count_compiles(graphs.mlp_block, shapes, d)["compiles"] for d in cm.DYNAMIC_CHOICES}
    assert got["static"] == len(shapes)   # one graph per shape
    assert got["automatic"] == 2          # static first, then one dynamic recompile
    assert got["dynamic"] == 1
    assert got["mark_dynamic"] == 1


def test_generated_cpp_code_fuses_bias_gelu_residual():
    """One Inductor compile on CPU: one fused C++ kernel instead of three eager ops, right values."""
    g = torch.Generator().manual_seed(0)
    x, b, r = torch.randn(64, 128, generator=g), torch.randn(128, generator=g), torch.randn(64, 128, generator=g)
    out, code = cm.generated_code(cm.bias_gelu_residual, x, b, r)
    torch.testing.assert_close(out, cm.bias_gelu_residual(x, b, r), rtol=1e-5, atol=1e-5)
    s = cm.fusion_summary(code, cm.bias_gelu_residual, x, b, r)
    assert s["eager_ops"] == ["add", "gelu", "add"]
    assert len(s["kernels"]) == 1 and s["language"] == "C++"
    name = s["kernels"][0]
    assert "gelu" in s["fused"][name] and "add" in s["fused"][name]
    assert "extern \"C\"" in cm.kernel_source(code, name)
    assert s["traffic_bytes"]["eager"] > 2 * s["traffic_bytes"]["fused"]
    with pytest.raises(ValueError, match=name):
        cm.kernel_source(code, "nope")


def test_measure_modes_on_cpu_skips_gpu_modes():
    res = cm.measure_modes(torch.nn.functional.gelu, [(torch.randn(32, 32),)], modes=["eager", "reduce-overhead"],
                           repeat=3)
    assert res["eager"].steady_s > 0 and res["eager"].compile_s is not None
    assert res["eager"].as_dict()["speedup_vs_eager"] == pytest.approx(1.0)
    assert "CUDA" in res["reduce-overhead"].skipped


def test_decode_step_matches_full_forward():
    step, inputs = workloads.decode_setup("smoke", device="cpu", dtype=torch.float32, positions=12)
    ref = workloads.decode_reference(step, inputs)
    tokens = torch.cat([t for t, _ in inputs])[None]
    full = step.model(tokens)[0]
    torch.testing.assert_close(ref[:, 0], full, rtol=1e-4, atol=1e-5)
    assert all(float(kv.abs().sum()) == 0 for kv in step.caches())  # reset after the reference


def test_decode_step_is_one_graph():
    step, inputs = workloads.decode_setup("smoke", device="cpu", dtype=torch.float32, positions=2)
    r = cm.graph_report(step, *inputs[0])
    assert r["graph_breaks"] == 0


def test_train_step_learns_on_cpu():
    model, opt, data = workloads.train_setup("smoke", device="cpu", batch=4, steps=12)
    step = workloads.make_train_step(model, opt, device_type="cpu")
    for g in opt.param_groups:
        g["lr"] = 1e-2
    losses = [float(step(d)) for d in data]
    assert losses[-1] < losses[0]
    assert all(p.grad is None for p in model.parameters())


def test_tiny_gpt_presets_and_errors():
    for name, cfg in tiny_gpt.PRESETS.items():
        with torch.device("meta"):
            m = tiny_gpt.TinyGPT(cfg)
        assert sum(p.numel() for p in m.parameters()) == cfg.n_params(), name
    assert 2e8 < tiny_gpt.PRESETS["full"].n_params() < 6e8
    with pytest.raises(ValueError, match="smoke"):
        tiny_gpt.config("huge")


def test_compile_bench_topic_eager_on_cpu():
    rec = benchmarks.run_topic("compile", {"size": "smoke", "device": "cpu", "decode_modes": ["eager", "reduce-overhead"],
                                      "train_modes": ["eager"], "repeat": 3})
    rows = {r["name"]: r for r in rec["results"]}
    assert rows["decode eager"]["correct"] and rows["train eager"]["correct"]
    assert rows["decode reduce-overhead"]["skipped"]
    assert rec["summary"]["decode_graphs"]["graph_breaks"] == 0
    assert set(rec["summary"]["targets"]) == {"reduce-overhead decode >= 3x eager",
                                              "max-autotune training step >= 1.2x eager"}
    with pytest.raises(ValueError, match="valid modes"):
        benchmarks.run_topic("compile", {"size": "smoke", "device": "cpu", "decode_modes": ["warp"]})


# ---- GPU ------------------------------------------------------------------------------------

@pytest.mark.gpu
def test_gpu_reduce_overhead_decode_matches_eager_and_uses_one_launch():
    from course_kit.compile_modes.kernels import profile_launches
    step, inputs = workloads.decode_setup("smoke", device="cuda", dtype=torch.bfloat16, positions=8)
    ref = workloads.decode_reference(step, inputs)
    f = cm.compile_with_mode(step, "reduce-overhead")
    with torch.no_grad():
        outs = torch.stack([f(*a).clone() for a in inputs])
        torch.testing.assert_close(outs.float(), ref.float(), rtol=5e-2, atol=5e-2)
        for _ in range(3):
            f(*inputs[0])
        eager = profile_launches(step, *inputs[0])
        graph = profile_launches(f, *inputs[0])
    assert eager["launch_calls_per_call"] > 20
    # A replay is one graph launch plus a few input copies: far fewer host launches.
    assert graph["launch_calls_per_call"] < eager["launch_calls_per_call"] / 4
    assert eager["gpu_kernels_per_call"] > 0 and eager["top_kernels"]


@pytest.mark.gpu
def test_gpu_default_train_step_matches_eager_loss():
    losses = {}
    for mode in ("eager", "default"):
        torch._dynamo.reset()
        model, opt, data = workloads.train_setup("smoke", device="cuda", batch=4, steps=3)
        step = workloads.make_train_step(model, opt, device_type="cuda")
        step = workloads.make_train_step(model, opt, cm.compile_with_mode(step.loss_eager, mode), "cuda")
        losses[mode] = [float(step(d)) for d in data]
    assert losses["default"] == pytest.approx(losses["eager"], rel=2e-2)


def _train_row(mode: str, steady_ms: float, kernels: dict, spread: float = 0.01, total: float | None = None) -> dict:
    row = {"mode": mode, "name": f"train {mode}", "steady_s": steady_ms / 1e3, "spread": spread,
           "launch_calls_per_call": 200.0,
           "top_kernels": [{"kernel": k, "count": 1.0, "gpu_us_per_call": us} for k, us in kernels.items()]}
    if total is not None:
        row["gpu_us_per_call_total"] = total
    return row


def test_explain_train_separates_kernel_gap_from_the_rest():
    from course_kit.compile_modes.explain import explain_train, kernel_key
    assert kernel_key("triton_red_fused_softmax_19") == kernel_key("triton_red_fused_softmax_22")
    gemm = {"nvjet_sm90_tst_192x128": 900.0, "Optimizer.step#AdamW.step": 400.0}
    rows = {"eager": _train_row("eager", 11.0, {**gemm, "elementwise_copy": 1100.0}),
            "default": _train_row("default", 7.0, {**gemm, "triton_red_fused_softmax_19": 340.0}),
            "max-autotune-no-cudagraphs": _train_row("max-autotune-no-cudagraphs", 10.0,
                                                     {**gemm, "triton_red_fused_softmax_22": 330.0,
                                                      "Optimizer.step#AdamW.step": 520.0}, spread=0.17)}
    why = explain_train(rows, "max-autotune-no-cudagraphs")
    t = why["text"]
    assert "1.10x faster than eager" in t and "missed" not in t and "target" not in t
    assert "3.00 ms slower than `default`" in t
    assert "outside" in t and "17%" in t and "same cuBLAS kernels" in t
    assert why["kernel_deltas"] and all("#" not in d["kernel"] for d in why["kernel_deltas"])  # ranges are not kernels
    assert why["gpu_us_complete"] is False
    # A gap that is in the kernels is named kernel by kernel.
    rows["max-autotune-no-cudagraphs"] = _train_row("max-autotune-no-cudagraphs", 10.0,
                                                    {"triton_mm_7": 3900.0}, total=4300.0)
    rows["default"]["gpu_us_per_call_total"] = 1300.0
    why = explain_train(rows, "max-autotune-no-cudagraphs")
    assert "in the kernels" in why["text"] and "`triton_mm`" in why["text"] and why["gpu_us_complete"]
    # Faster than `default`: said so, and no claim that autotuning had nothing to gain.
    rows["max-autotune-no-cudagraphs"] = _train_row("max-autotune-no-cudagraphs", 6.0, gemm)
    t = explain_train(rows, "max-autotune-no-cudagraphs")["text"]
    assert "1.83x faster than eager" in t and "faster than `default`" in t and "nothing to gain" not in t


def test_explain_train_does_not_explain_a_gap_inside_the_noise():
    from course_kit.compile_modes.explain import explain_train
    gemm = {"nvjet_sm90_tst_192x128": 900.0}
    rows = {"eager": _train_row("eager", 11.0, gemm), "default": _train_row("default", 7.54, gemm),
            "max-autotune": _train_row("max-autotune", 7.59, {**gemm, "triton_mm_3": 40.0})}
    t = explain_train(rows, "max-autotune")["text"]
    assert "about as fast (within 3%)" in t and "gained nothing measurable" in t
    assert "slower than `default`" not in t and "Most of the gap" not in t and "less than half" not in t
    rows["max-autotune"] = _train_row("max-autotune", 8.5, {**gemm, "triton_mm_3": 40.0})   # 13% slower
    t = explain_train(rows, "max-autotune")["text"]
    assert "slower than `default`" in t and "within 3%" not in t


def test_kernels_in_one_top_list_only_are_new_or_gone_not_slower_from_zero():
    """Review of the H200 record: `triton_tem_fused__to_copy_addmm_gelu_t_view` (249 µs, only in
    max-autotune's top kernels) was called "slower than in `default`: 0 -> 249 µs"; it is new there, and
    `nvjet_..._bias_TNT` (286 µs, only in default's) is gone."""
    import json
    from pathlib import Path
    from course_kit.compile_modes.explain import explain_train, kernel_deltas
    rec = json.loads((Path(__file__).resolve().parents[1] / "data/reference/h200/compile.json").read_text())
    rows = {r["mode"]: r for r in rec["results"] if r["name"].startswith("train")}
    mode = "max-autotune-no-cudagraphs"
    why = explain_train(rows, mode)
    t = why["text"]
    assert "0 -> 249" not in t and "286 -> 0" not in t
    assert "New among `max-autotune-no-cudagraphs`'s top kernels (not among `default`'s): " \
           "`triton_tem_fused__to_copy_addmm_gelu_t_view` 249 µs." in t
    assert "Gone from them (among `default`'s only): `nvjet_sm90_tst_192x128_64x5_1x2_h_bz_coopB_bias_TNT` 286 µs." in t
    status = {d["kernel"]: d["status"] for d in why["kernel_deltas"]}
    assert status["triton_tem_fused__to_copy_addmm_gelu_t_view"] == "new"
    assert status["nvjet_sm90_tst_192x128_64x5_1x2_h_bz_coopB_bias_TNT"] == "gone"
    assert status["triton_red_fused__log_softmax__to_copy__unsafe_view_prepare_softmax_online_view"] == "both"
    assert "No kernel in both top lists is slower" in t          # the softmax kernel got faster (356 -> 334)
    # a kernel in both lists that got slower is still called slower, with both times
    slower = kernel_deltas(_train_row("m", 1.0, {"k_3": 300.0}), _train_row("p", 1.0, {"k_9": 200.0}))
    assert slower == [{"kernel": "k", "us": 300.0, "peer_us": 200.0, "delta_us": 100.0, "status": "both"}]


def test_kernels_named_after_lambdas_are_kernels_not_ranges():
    """The 2026-11-30 cuda_graphs record counted 732 kernels for 05's eager step; its trace holds
    1,488: every kernel whose name carried '#' (PyTorch's '{lambda(int)#1}' kernels) was taken for a
    user range and dropped."""
    from types import SimpleNamespace as E
    from course_kit.compile_modes.kernels import is_annotation
    kernels = ["void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::"
               "launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar)::{lambda()#1}::"
               "operator()() const::{lambda()#8}::operator()() const::{lambda(float)#1}>(int, T2, T3)",
               "void at::native::index_elementwise_kernel<128, 4, at::native::gpu_index_kernel<"
               "at::native::index_kernel_impl<at::native::OpaqueType<2> >(at::TensorIteratorBase&)::"
               "{lambda(char*, char const*, long)#1}>(at::TensorIteratorBase&)::{lambda(int)#1}>(long, T3)",
               "triton_poi_fused_add_0", "nvjet_hsh_64x8_64x16_4x1_v_bz_splitK_TNT"]
    ranges = ["Optimizer.step#AdamW.step", "## Call CompiledFxGraph fy3ab7c ##"]
    assert [is_annotation(E(key=k)) for k in kernels] == [False] * len(kernels)
    assert [is_annotation(E(key=k)) for k in ranges] == [True, True]
    assert is_annotation(E(key="anything", is_user_annotation=True))
