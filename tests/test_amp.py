"""course_kit.amp: the hand-written loss scaler against torch.amp.GradScaler, precision modes,
gradient statistics. CPU, seconds."""
import math

import pytest
import torch

from course_kit import amp
from course_kit.models import tiny_gpt
from course_kit import benchmarks


@pytest.mark.parametrize("kw", [
    dict(init_scale=2.0**30, growth_interval=4),                                        # backoffs, then growth
    dict(init_scale=2.0**28, growth_interval=3, growth_factor=3.0, backoff_factor=0.3),  # non powers of two
])
def test_scaler_matches_torch_gradscaler(kw):
    """Same model, same batches, fp16 autocast on CPU: identical scale history, skipped steps,
    losses and final parameters."""
    steps = 24
    model0 = tiny_gpt.TinyGPT.from_preset("smoke", seed=1)
    data = tiny_gpt.batches(tiny_gpt.markov_tokens(64, 4096, seed=1), 4, 32, steps, seed=1)
    runs = {}
    for which in ("torch", "course"):
        model = tiny_gpt.TinyGPT.from_preset("smoke", seed=1)
        runs[which] = (amp.train("fp16_scaler", steps=steps, scaler=which, scaler_kwargs=kw,
                                 model=model, data=data, track_grads=False), model)
    (ref, m_ref), (ours, m_ours) = runs["torch"], runs["course"]
    assert ours.scales == ref.scales
    assert ours.skipped == ref.skipped
    assert ours.losses == ref.losses
    # Both behaviours were exercised: backoff (skipped steps) and growth (the scale rose).
    assert 0 < sum(ref.skipped) < steps
    assert any(b > a for a, b in zip(ref.scales, ref.scales[1:]))
    for (name, p), q in zip(m_ref.named_parameters(), m_ours.parameters()):
        assert torch.equal(p, q), name
    # And the models did move away from the initial weights.
    assert not torch.equal(next(m_ref.parameters()), next(model0.parameters()))


def test_scaler_update_rule_unit():
    """Scale arithmetic on hand-made gradients, against GradScaler's update on the same sequence."""
    p = torch.nn.Parameter(torch.ones(3))
    opt_a = torch.optim.SGD([p], lr=0.0)
    ours = amp.DynamicLossScaler(init_scale=8.0, growth_interval=2)
    ref = torch.amp.GradScaler("cpu", init_scale=8.0, growth_interval=2)
    pattern = [False, False, True, False, False, False, True, True, False, False]
    for bad in pattern:
        for s in (ours, ref):
            s.scale(torch.tensor(1.0))  # GradScaler creates its scale lazily here
            p.grad = torch.tensor([1.0, float("inf") if bad else 2.0, 3.0])
            s.step(opt_a)
            s.update()
        assert ours.get_scale() == ref.get_scale()
    assert ours.skipped == pattern


def test_scaler_never_grows_to_inf():
    s = amp.DynamicLossScaler(init_scale=2.0**127, growth_interval=1)
    p = torch.nn.Parameter(torch.ones(2))
    p.grad = torch.ones(2)
    s.unscale_([p])
    s.update()
    assert s.get_scale() == 2.0**127


def test_unscale_multiplies_by_rounded_reciprocal():
    s = amp.DynamicLossScaler(init_scale=3.0)
    p = torch.nn.Parameter(torch.zeros(4))
    p.grad = torch.tensor([3.0, 6.0, -9.0, 1e-3])
    assert s.unscale_([p]) is False
    inv = torch.tensor(3.0, dtype=torch.float64).reciprocal().float()
    assert torch.equal(p.grad, torch.tensor([3.0, 6.0, -9.0, 1e-3]) * inv)


@pytest.mark.parametrize("bad", [dict(init_scale=0), dict(growth_factor=1.0), dict(backoff_factor=1.5),
                                 dict(growth_interval=0)])
def test_scaler_bad_arguments(bad):
    with pytest.raises(ValueError):
        amp.DynamicLossScaler(**bad)


def test_bad_precision_name_lists_valid_names():
    with pytest.raises(ValueError) as e:
        amp.get("fp8")
    for name in amp.PRECISIONS:
        assert name in str(e.value)
    with pytest.raises(ValueError, match="fp32"):
        amp.compare(["fp32", "half"], steps=1)
    with pytest.raises(ValueError, match="course"):
        amp.train("fp32", scaler="apex", steps=1)


def test_precision_context_restores_matmul_precision():
    before = torch.get_float32_matmul_precision()
    with amp.get("tf32").context("cpu"):
        assert torch.get_float32_matmul_precision() == "high"
    with amp.get("bf16").context("cpu"):
        assert torch.get_float32_matmul_precision() == "highest"
        assert (torch.randn(4, 4) @ torch.randn(4, 4)).dtype == torch.bfloat16
    assert torch.get_float32_matmul_precision() == before


def test_underflow_fractions_against_fp16_cast():
    """'underflow' counts values below fp16's smallest subnormal: a superset of what an actual cast
    flushes to zero (values below 2**-25)."""
    g = torch.logspace(-40, 2, 2000, base=2.0)
    fr = amp.underflow_fractions(g)
    below = (g < 2.0**-24).double().mean().item()
    assert fr["underflow"] == pytest.approx(below)
    # Every value a cast flushes to zero is counted as underflow.
    flushed = (g.half() == 0).double().mean().item()
    assert flushed <= fr["underflow"]
    assert fr["subnormal"] == pytest.approx(((g >= 2.0**-24) & (g < 2.0**-14)).double().mean().item())
    # Scaling by 2**16 lifts them: underflow shrinks, some overflow appears.
    fr_s = amp.underflow_fractions(g, scale=2.0**16)
    assert fr_s["underflow"] < fr["underflow"]
    assert fr_s["overflow"] == pytest.approx((g * 2.0**16 > 65504).double().mean().item())


def test_log2_histogram_counts_everything():
    g = torch.tensor([0.0, 2.0**-30, 2.0**-30 * 1.5, 0.5, 3.0, float("inf")])
    h = amp.log2_histogram(g, lo=-40, hi=4)
    assert sum(h["counts"]) == 4
    assert h["counts"][h["log2_lo"].index(-30)] == 2
    assert h["min_subnormal_log2"] == -24 and h["min_normal_log2"] == -14


def test_training_runs_every_mode_and_learns():
    res = amp.compare(list(amp.PRECISIONS), steps=25, batch=8, lr=1e-2)
    assert list(res) == list(amp.PRECISIONS)
    for name, r in res.items():
        assert len(r.losses) == len(r.times_s) == len(r.underflow) == 25
        assert r.losses[-1] < r.losses[0] - 0.3, name
        assert r.grad_hist is not None and sum(r.grad_hist["counts"]) > 0
    # fp32 and tf32 are the same thing on a CPU.
    assert res["fp32"].losses == res["tf32"].losses
    # Autocast saves 16-bit activations: less memory kept for backward than in fp32.
    assert res["bf16"].saved_bytes < res["fp32"].saved_bytes
    assert res["fp32"].scales == [1.0] * 25
    assert math.log(64) == pytest.approx(res["fp32"].losses[0], abs=0.3)


@pytest.mark.gpu
def test_gpu_scaler_matches_gradscaler_on_cuda():
    steps, kw = 16, dict(init_scale=2.0**30, growth_interval=4)
    data = tiny_gpt.batches(tiny_gpt.markov_tokens(64, 4096, seed=2), 4, 32, steps, seed=2, device="cuda")
    runs, models = {}, {}
    for which in ("torch", "course"):
        models[which] = tiny_gpt.TinyGPT.from_preset("smoke", seed=2, device="cuda")
        runs[which] = amp.train("fp16_scaler", steps=steps, scaler=which, scaler_kwargs=kw, device="cuda",
                                model=models[which], data=data, track_grads=False)
    assert runs["course"].scales == runs["torch"].scales
    assert sum(runs["torch"].skipped) > 0
    for p, q in zip(models["torch"].parameters(), models["course"].parameters()):
        assert torch.equal(p, q)


@pytest.mark.gpu
def test_gpu_every_mode_trains_and_records_memory():
    res = amp.compare(list(amp.PRECISIONS), steps=6, batch=4, device="cuda", preset="smoke")
    for name, r in res.items():
        assert r.peak_mem_bytes and r.peak_mem_bytes > 0, name
        assert all(x == x for x in r.losses), name


def test_amp_bench_topic_smoke_on_cpu():
    rec = benchmarks.run_topic("amp", {"size": "smoke", "device": "cpu", "modes": ["fp32", "fp16_scaler"]})
    s = rec["summary"]
    assert s["checks"]["same_scale_history"] and s["checks"]["same_params"] and s["checks_passed"]
    assert "fp16_scaler_speedup_vs_fp32" in s and set(s["targets"]) == {
        "bf16_speedup_vs_fp32 >= 2.5", "fp16_scaler_skipped_after_warmup <= 0.01"}
    names = [r["name"] for r in rec["results"]]
    assert names == ["fp32", "fp16_scaler"]
    assert all(len(r["losses"]) == r["steps"] for r in rec["results"])


def test_precision_tf32_scope_sets_every_switch_and_restores():
    before = amp.tf32_flags()
    with amp.get("fp32").tf32_scope():
        assert amp.tf32_flags() == {"float32_matmul_precision": "highest", "cuda_matmul_allow_tf32": False,
                                    "cudnn_allow_tf32": False}
    with amp.get("tf32").tf32_scope():
        assert amp.tf32_flags() == {"float32_matmul_precision": "high", "cuda_matmul_allow_tf32": True,
                                    "cudnn_allow_tf32": True}
    assert amp.tf32_flags() == before
    # The training loop holds the scope over the whole step and records what it saw.
    r = amp.train("fp32", steps=1, batch=2, track_grads=False)
    assert r.tf32_flags["float32_matmul_precision"] == "highest" and not r.tf32_flags["cuda_matmul_allow_tf32"]
    assert amp.tf32_flags() == before


def _amp_results(bf16_speedup: float) -> list[dict]:
    return [{"name": "fp32", "median_step_s": 1.0, "peak_mem_gib": 30.0, "loss_finite": True},
            {"name": "bf16", "median_step_s": 1.0 / bf16_speedup, "peak_mem_gib": 20.0, "loss_finite": True}]


def test_amp_summary_explains_a_missed_target_and_survives_oom():
    from course_kit.benchmarks import amp as amp_bench
    cfg = tiny_gpt.config("smoke")
    checks = {"same_scale_history": True, "same_params": True}
    prof = {m: {"top": [{"kernel": "sm90_xmma_gemm", "count": 1, "gpu_ms": ms}],
                "class_ms": {"gemm": ms, "attention": 0.0, "other": other}}
            for m, ms, other in (("fp32", 90.0, 20.0), ("bf16", 10.0, 15.0))}
    calls = []

    def explain():
        calls.append(1)
        return prof

    kw = dict(cfg=cfg, preset="smoke", batch=8, device="cuda")
    s = amp_bench.summarize(_amp_results(2.0), checks, explain=explain, **kw)
    assert not s["targets"]["bf16_speedup_vs_fp32 >= 2.5"] and s["max_peak_mem_gib"] == 30.0
    assert s["explain_top_kernels"]["bf16"][0]["gpu_ms"] == 10.0
    # Profiled: fp32 110 ms, bf16 25 ms (4.40x); the memory-bound 15 ms caps the speed-up near 110/15.
    assert "2.00x" in s["explain"] and "4.40x" in s["explain"] and "7.3x" in s["explain"]
    # A met target does not profile; neither does a CPU run.
    s = amp_bench.summarize(_amp_results(3.0), checks, explain=explain, **kw)
    assert "explain" not in s and len(calls) == 1
    s = amp_bench.summarize(_amp_results(2.0), checks, explain=explain, **{**kw, "device": "cpu"})
    assert "explain" not in s and len(calls) == 1

    def oom():
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 16.00 MiB")

    s = amp_bench.summarize(_amp_results(2.0), checks, explain=oom, **kw)
    assert "skipped" in s["explain"] and "out of memory" in s["explain"]
    assert "explain_top_kernels" not in s
    # Any other error is a bug and is not swallowed.
    with pytest.raises(ZeroDivisionError):
        amp_bench.summarize(_amp_results(2.0), checks, explain=lambda: 1 / 0, **kw)


def test_kernel_classes_from_names():
    from course_kit.benchmarks.amp import _kernel_class
    assert _kernel_class("sm90_xmma_gemm_bf16bf16_bf16f32") == "gemm"
    assert _kernel_class("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT") == "gemm"
    assert _kernel_class("fmha_cutlassF_f32_aligned_64x64_rf_sm80") == "attention"
    assert _kernel_class("void at::native::vectorized_elementwise_kernel<4, GeluCUDAKernelImpl>") == "other"
