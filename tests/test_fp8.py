"""fp8 training (notebook 02, §6): the layer against an fp64 reference of the same quantised values,
the path decision by capability, the scaling modes, and fp8 training against bf16 (the oracle)."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from course_kit.amp import fp8, fp8_train
from course_kit.amp.train import saved_bytes_by_dtype
from course_kit.amp.fp8 import E4M3, E5M2

GEN = torch.Generator().manual_seed(0)


def _randn(*shape, scale=1.0):
    return torch.randn(*shape, generator=GEN) * scale


def _q(t, dtype):
    """The reference cast: scale from this tensor's amax, saturate, round to the fp8 grid; in fp64."""
    scale = fp8.fp8_max(dtype) / t.abs().max().double()
    q = (t.double() * scale).clamp(-fp8.fp8_max(dtype), fp8.fp8_max(dtype)).float().to(dtype).double()
    return q, scale


def _layer(in_f=32, out_f=48, **kw):
    torch.manual_seed(0)
    lin = nn.Linear(in_f, out_f)
    return lin, fp8.Fp8Linear.from_linear(lin, **kw)


def test_forward_and_backward_equal_fp64_on_the_same_quantised_values():
    lin, layer = _layer()
    x = _randn(4, 8, 32, scale=3.0).requires_grad_()
    g = _randn(4, 8, 48, scale=1e-3)
    y = layer(x)
    y.backward(g)
    xq, sx = _q(x.detach().reshape(-1, 32), E4M3)
    wq, sw = _q(lin.weight.detach(), E4M3)
    gq, sg = _q(g.reshape(-1, 48), E5M2)
    y_ref = (xq @ wq.T) / (sx * sw) + lin.bias.double()
    gx_ref = (gq @ wq) / (sg * sw)
    gw_ref = (gq.T @ xq) / (sg * sx)
    assert y.dtype == torch.float32 and layer.last_path == "emulated"
    torch.testing.assert_close(y.detach().double().reshape(-1, 48), y_ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(x.grad.double().reshape(-1, 32), gx_ref, rtol=1e-5, atol=1e-9)
    torch.testing.assert_close(lin.weight.grad.double(), gw_ref, rtol=1e-5, atol=1e-9)
    torch.testing.assert_close(lin.bias.grad, g.reshape(-1, 48).sum(0))
    # the reference tells the formats apart: gradients in e4m3 instead of e5m2 give other numbers,
    # and so does no quantisation at all
    gq4, sg4 = _q(g.reshape(-1, 48), E4M3)
    assert ((gq4 @ wq) / (sg4 * sw) - gx_ref).abs().max() > 1e-3 * gx_ref.abs().max()
    assert (y.detach() - lin(x).detach()).abs().max() > 1e-3


def test_cast_maps_amax_onto_the_format_max_and_records_what_it_did():
    _, layer = _layer()
    x = _randn(16, 32, scale=1e-4)
    q, scale = layer.cast("input", x)
    assert q.dtype == E4M3 and q.float().abs().max() == 448.0
    assert float(scale) == pytest.approx(448.0 / float(x.abs().max()), rel=1e-6)
    stats = {k: float(v) for k, v in layer.last["input"].items()}
    assert stats["flushed_scaled"] == 0.0 and stats["saturated"] == 0.0
    assert stats["flushed_unscaled"] > 0.9          # 1e-4 is far below e4m3's smallest subnormal (2^-9)
    g = _randn(16, 48, scale=1e5)                   # past e5m2's max (57344)
    layer.cast("grad_output", g)
    assert float(layer.last["grad_output"]["overflow_unscaled"]) == 1.0


def test_delayed_scaling_saturates_a_tensor_that_outgrows_its_history():
    _, delayed = _layer(scaling="delayed", history=4)
    _, dynamic = _layer(scaling="dynamic")
    x = _randn(16, 32)
    for layer in (delayed, dynamic):
        layer.cast("input", x)
        layer.cast("input", 10 * x)
    assert float(delayed.last["input"]["saturated"]) > 0.01
    assert float(dynamic.last["input"]["saturated"]) == 0.0
    _, none = _layer(scaling="none")
    none.cast("grad_output", _randn(16, 48, scale=1e-6))
    s = {k: float(v) for k, v in none.last["grad_output"].items()}
    assert s["scale"] == 1.0 and s["flushed_scaled"] == s["flushed_unscaled"] > 0.5


def test_scaled_mm_layout_equals_the_emulated_path():
    """torch._scaled_mm (CPU build here, cuBLASLt on a GPU) with the operand layouts the GPU path uses."""
    x, g = _randn(32, 64, scale=2.0), _randn(32, 48, scale=1e-2)
    outs = {}
    for path in ("emulated", "scaled_mm"):
        lin, layer = _layer(64, 48, path=path)
        xi = x.clone().requires_grad_()
        try:
            y = layer(xi)
        except (RuntimeError, NotImplementedError) as err:   # a torch whose CPU build lacks fp8 GEMMs
            pytest.skip(f"torch._scaled_mm does not run on this CPU build: {err}")
        y.backward(g)
        outs[path] = (y.detach(), xi.grad, lin.weight.grad)
    for a, b in zip(outs["emulated"], outs["scaled_mm"]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device_type, cap, dims, path, words", [
    ("cpu", None, (16, 32, 48), "emulated", "no CUDA GPU"),
    ("cuda", (7, 5), (16, 32, 48), "emulated", "sm_75 has no fp8 tensor cores"),
    ("cuda", (8, 0), (16, 32, 48), "emulated", "sm_80 has no fp8 tensor cores"),
    ("cuda", (8, 9), (16, 32, 48), "scaled_mm", "torch._scaled_mm"),
    ("cuda", (9, 0), (16, 32, 48), "scaled_mm", "torch._scaled_mm"),
    ("cuda", (9, 0), (8, 32, 40), "emulated", "[8, 40]"),
])
def test_path_follows_the_capability(device_type, cap, dims, path, words):
    got, why = fp8.choose_path(device_type, cap, dims)
    assert got == path and words in why


def test_the_layer_asks_device_for_the_capability(monkeypatch):
    _, layer = _layer()
    layer(_randn(16, 32))
    assert layer.last_path == "emulated" and "no CUDA GPU" in layer.why
    with pytest.raises(ValueError, match="scaling"):
        fp8.Fp8Linear(4, 4, scaling="per-row")
    with pytest.raises(ValueError, match="path"):
        fp8.Fp8Linear(4, 4, path="cublas")


def test_to_fp8_swaps_the_block_linears_and_keeps_the_parameters():
    from course_kit.models.tiny_gpt import TinyGPT
    model = TinyGPT.from_preset("smoke")
    before = [id(p) for p in model.parameters()]
    names = fp8.to_fp8(model)
    assert names == [f"blocks.{i}.{n}" for i in range(2) for n in ("qkv", "proj", "fc", "out")]
    assert [id(p) for p in model.parameters()] == before
    with pytest.raises(ValueError, match="no nn.Linear"):
        fp8.to_fp8(nn.Sequential(nn.ReLU()))


def test_fp8_training_stays_within_tolerance_of_bf16():
    """The oracle: same seed, same batches, bf16 autocast against fp8 (emulated on CPU)."""
    c = fp8_train.compare(("bf16", "fp8"), preset="smoke", steps=20, batch=8)
    bf16, f8 = c.final_loss("bf16"), c.final_loss("fp8")
    assert abs(f8 - bf16) / bf16 <= fp8_train.LOSS_TOLERANCE
    assert f8 < c.runs["fp8"].losses[0] - 0.3            # it trained
    assert c.why["fp8"].startswith("emulated")
    assert any(k.startswith("float8") for k in c.runs["fp8"].saved_by_dtype)
    steps = c.histories["fp8"].steps
    assert len(steps) == 20 and set(steps[0]["blocks.0.fc"]) == set(fp8.ROLES)
    # the history keeps numbers, names and paths, not the trained model's weights
    assert all(m is None for m in c.histories["fp8"].layers.values())
    assert c.histories["fp8"].paths()["blocks.1.out"].startswith("emulated")


class _Chain(nn.Module):
    """Four exps in a row: each saves its output, and a freed intermediate's memory gets reused."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(1000))

    def loss(self, tokens):
        x = self.w * 1.0
        for _ in range(4):
            x = x.exp() * 0.1
        return x.sum()


def test_saved_bytes_counts_every_tensor_once():
    by = saved_bytes_by_dtype(_Chain(), torch.zeros(1), "fp32")
    # 4 exp outputs + 4 products' saved scalars are not tensors of storage: 4 x 4000 bytes
    assert by == {"float32": 4 * 4000}


def _history(rows):
    h = fp8.ScaleHistory.__new__(fp8.ScaleHistory)
    h.layers, h.steps = {"blocks.0.fc": None}, rows
    return h


def _stats(amax, scale, fu=0.0, fs=0.0, over=0.0):
    return {"amax": amax, "scale": scale, "flushed_unscaled": fu, "flushed_scaled": fs,
            "overflow_unscaled": over, "saturated": 0.0}


def test_out_of_range_prefers_an_overflow_then_the_worst_underflow():
    under = [{"blocks.0.fc": {"grad_output": _stats(1e-4, 5e8, fu=0.6, fs=0.0)}},
             {"blocks.0.fc": {"grad_output": _stats(1e-4, 5e8, fu=0.8, fs=0.1)}}]
    f = fp8_train.out_of_range(_history(under))
    assert (f["kind"], f["step"], f["format"]) == ("underflow", 1, "e5m2")
    text = fp8_train.explain_out_of_range(f)
    assert "80.0%" in text and "flushed to zero" in text and "overflowed unscaled" in text
    over = under + [{"blocks.0.fc": {"input": _stats(900.0, 0.5, over=1.0)}}]
    f = fp8_train.out_of_range(_history(over))
    assert (f["kind"], f["step"], f["role"]) == ("overflow", 2, "input")
    assert "overflowed" in fp8_train.explain_out_of_range(f) and "2.0x" in fp8_train.explain_out_of_range(f)
    calm = [{"blocks.0.fc": {"input": _stats(3.0, 100.0)}}]
    assert fp8_train.out_of_range(_history(calm)) == {"kind": None}
    assert "No tensor" in fp8_train.explain_out_of_range({"kind": None})


def _run(losses):
    from course_kit.amp.train import RunResult
    return RunResult("x", "cpu", losses=losses)


def test_explainers_follow_the_numbers():
    near = fp8_train.Fp8Comparison({"bf16": _run([3.0] * 5), "fp8": _run([3.03] * 5)})
    far = fp8_train.Fp8Comparison({"bf16": _run([3.0] * 5), "fp8": _run([3.3] * 5)})
    assert "within the 2% tolerance" in fp8_train.explain_loss(near, 0.02)
    assert "outside the 2% tolerance" in fp8_train.explain_loss(far, 0.02)
    assert "1.0% above" in fp8_train.explain_loss(near, 0.02)
    slow = fp8_train.explain_speed({"bf16": 0.01, "fp8": 0.02}, "emulated: no CUDA GPU")
    fast = fp8_train.explain_speed({"bf16": 0.02, "fp8": 0.01}, "torch._scaled_mm on the fp8 tensor cores")
    assert "2.00x slower" in slow and "measures the emulation" in slow
    assert "2.00x faster" in fast and "emulation" not in fast
    mem = fp8_train.explain_memory({"bf16": {"bfloat16": 2 << 20}, "fp8": {"float8_e4m3fn": 1 << 20}})
    assert "1 MiB less than" in mem and "(100%)" in mem
    more = fp8_train.explain_memory({"bf16": {"bfloat16": 1 << 20}, "fp8": {"float8_e4m3fn": 2 << 20}})
    assert "more than" in more
    with pytest.raises(ValueError, match="bf16"):
        fp8_train.explain_speed({"fp8": 0.1}, "x")


def test_the_bench_runs_its_phases_within_budget_and_records_skips():
    from course_kit.benchmarks import fp8_train as fp8_bench
    out = fp8_bench.run({"size": "smoke", "device": "cpu", "steps": 4, "budget_s": 0})
    assert [r["name"] for r in out["results"]] == ["bf16", "fp8"]
    assert out["layer_check"]["path"] == "emulated" and out["layer_check"]["output_rel_diff"] == 0.0
    assert all("budget" in out["errors"][k] for k in ("ranges_fp8", "ranges_fp8_delayed", "layer_times"))
    s = out["summary"]
    assert s["checks_passed"] and "fp8_speedup_vs_bf16" in s and s["path"] == "emulated"


def test_layer_time_explainer_names_the_casts_only_when_they_dominate():
    row = {"name": "fc", "tokens": 8192, "in": 1024, "out": 4096, "matmul_bf16_s": 2e-4, "matmul_fp8_s": 1e-4,
           "linear_bf16_s": 8e-4, "linear_fp8_s": 1e-3, "cast_overhead_s": 7e-4}
    cast_bound = fp8_train.explain_layer_times([row])
    assert "the matmul 2.00x faster than" in cast_bound and "1.25x slower than" in cast_bound
    assert "700 µs against 300 µs" in cast_bound
    quick = dict(row, linear_fp8_s=5e-4, cast_overhead_s=2e-4)
    text = fp8_train.explain_layer_times([quick])
    assert "1.60x faster than bf16's" in text and "outside its three matmuls" not in text
    rec = fp8_train.explain_record({"fp8_speedup_vs_bf16": 1.3, "fp8_loss_gap": 0.004, "why": "torch._scaled_mm"},
                                   "H200")
    assert "1.30x faster than" in rec and "0.40% above" in rec and "within" in rec


@pytest.mark.gpu
def test_the_gpu_takes_the_fp8_tensor_cores_and_matches_the_emulation():
    from course_kit import device
    from course_kit.benchmarks.fp8_train import layer_check
    r = layer_check("cuda")
    if device.capabilities().fp8:
        assert r["path"] == "scaled_mm", r["why"]
    else:
        assert r["path"] == "emulated" and "no fp8 tensor cores" in r["why"]
    # the same quantised values: only the fp32 accumulation order differs
    assert max(r["output_rel_diff"], r["grad_input_rel_diff"], r["grad_weight_rel_diff"]) < 1e-3, r
    c = fp8_train.compare(("bf16", "fp8"), preset="smoke", steps=20, batch=8, device="cuda")
    assert abs(c.final_loss("fp8") - c.final_loss("bf16")) / c.final_loss("bf16") <= fp8_train.LOSS_TOLERANCE


def test_a_failing_scaled_mm_is_said_and_the_emulation_takes_over(monkeypatch):
    def broken(*a, **k):
        raise RuntimeError("CUBLAS_STATUS_NOT_SUPPORTED when calling cublasLtMatmul\nmore")

    monkeypatch.setattr(torch, "_scaled_mm", broken)
    lin, layer = _layer(32, 48, path="scaled_mm")
    ref_lin, ref = _layer(32, 48, path="emulated")
    x = _randn(16, 32)
    y = layer(x.clone().requires_grad_())
    torch.testing.assert_close(y, ref(x.clone().requires_grad_()))
    assert layer.last_path == "emulated" and "CUBLAS_STATUS_NOT_SUPPORTED" in layer.why
    layer(x)                                                   # and it stays said on the next call
    assert "torch._scaled_mm failed" in layer.why
