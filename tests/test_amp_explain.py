"""Notebook 02's new pieces: the saved-bytes probe no longer leaks, activation gradients hooked under
autocast, the loss-scale zones against torch's own casts, the scaler pair against GradScaler, and
the explainers in both directions (on hand-made rows and on the real H200 record)."""
from __future__ import annotations

import gc
from pathlib import Path

import pytest
import torch

from course_kit import amp
from course_kit.amp import explain as X
from course_kit.amp.activations import zones
from course_kit.models import tiny_gpt

ROOT = Path(__file__).resolve().parents[1]


def _live_tensors() -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if torch.is_tensor(o))


def test_saved_bytes_probe_frees_its_forward_graph():
    model = tiny_gpt.TinyGPT.from_preset("smoke", seed=0)
    tokens = torch.randint(0, model.cfg.vocab, (2, model.cfg.seq_len + 1))
    amp.saved_bytes_by_dtype(model, tokens, "bf16")       # first call: lazily made module state settles
    before = _live_tensors()
    for _ in range(3):
        by = amp.saved_bytes_by_dtype(model, tokens, "bf16")
    # the leak made this grow by one forward's tensors a call; other tests' garbage may only shrink it
    assert _live_tensors() <= before
    assert by["bfloat16"] > 0 and by["float32"] > 0
    assert amp.saved_activation_bytes(model, tokens, "fp32") > sum(by.values())


def test_activation_grads_match_autograd_and_dtype():
    model = tiny_gpt.TinyGPT.from_preset("smoke", seed=0)
    tokens = torch.randint(0, model.cfg.vocab, (4, model.cfg.seq_len + 1))
    g = amp.activation_grads(model, tokens, "fp32")
    # oracle: dL/dlogits of a mean cross-entropy is (softmax - onehot) / N
    logits = model(tokens[:, :-1]).detach()
    n = logits.shape[0] * logits.shape[1]
    expect = (torch.softmax(logits, -1) - torch.nn.functional.one_hot(tokens[:, 1:], model.cfg.vocab)) / n
    torch.testing.assert_close(g["logits"]["mags"], expect.abs().flatten(), rtol=1e-4, atol=1e-9)
    assert all(p.grad is None for p in model.parameters())
    g16 = amp.activation_grads(model, tokens, "fp16_noscale", scale=2.0**8)
    assert g16["logits"]["dtype"] == "float16" and g["logits"]["dtype"] == "float32"
    with pytest.raises(ValueError, match="scale"):
        amp.activation_grads(model, tokens, "fp32", scale=0.0)


def test_fp16_flushes_logit_grads_below_its_subnormal():
    # 256 tokens x vocab 64: dL/dlogits ~ 2**-14. A loss multiplied by 2**-14 puts them near 2**-28, as a
    # step of 8192 tokens over a 32768 vocabulary would: fp16 flushes most of them; fp32 keeps them.
    model = tiny_gpt.TinyGPT.from_preset("smoke", seed=0)
    tokens = torch.randint(0, 64, (8, 33), generator=torch.Generator().manual_seed(0))
    assert amp.typical_logit_grad(8 * 32, 64) == 2.0**-14
    small = amp.activation_grads(model, tokens, "fp16_noscale", scale=2.0**-14)
    assert small["logits"]["zero"] > 0.5
    assert amp.activation_grads(model, tokens, "fp32", scale=2.0**-14)["logits"]["zero"] == 0.0
    assert amp.activation_grads(model, tokens, "fp16_noscale")["logits"]["zero"] < 0.01


@pytest.mark.parametrize("fmt, dtype", [("fp16", torch.float16), ("bf16", torch.bfloat16),
                                        ("fp8_e5m2", torch.float8_e5m2)])
@pytest.mark.parametrize("log2_scale", [0, 8, 20])
def test_zones_agree_with_torch_casts(fmt, dtype, log2_scale):
    g = torch.Generator().manual_seed(0)
    # magnitudes at bin centres (1.5 x 2**e), never on the rounding edges
    e = torch.randint(-40, 4, (20_000,), generator=g).double()
    mags = 1.5 * torch.exp2(e)
    z = zones(amp.log2_hist(mags), fmt, log2_scale)
    cast = (mags * 2.0**log2_scale).to(dtype).double()
    f = torch.finfo(dtype)
    smallest_subnormal = f.smallest_normal * f.eps   # 2**-M below the smallest normal
    scaled = mags * 2.0**log2_scale
    assert z["underflow"] == pytest.approx(float((scaled < smallest_subnormal).sum()) / len(mags))
    assert z["overflow"] == pytest.approx(float(((cast.isinf()) | (cast > f.max)).sum()) / len(mags))
    # what the cast flushed to zero is inside the underflow zone
    assert float((cast == 0).sum()) / len(mags) <= z["underflow"] + 1e-12
    assert sum(z[k] for k in ("underflow", "subnormal", "normal", "overflow")) == pytest.approx(1.0)


def test_zones_move_with_scale_and_reject_bad_input():
    hist = amp.log2_hist(torch.tensor([2.0**-30, 2.0**-20, 2.0**0, 2.0**10]))
    assert zones(hist, "fp16", 0)["underflow"] == 0.25
    assert zones(hist, "fp16", 8)["underflow"] == 0.0
    assert zones(hist, "fp16", 8)["overflow"] == 0.25    # 2**18 > 65504
    with pytest.raises(ValueError, match="floating-point"):
        zones(hist, "int8", 0)
    with pytest.raises(ValueError, match="log2_scale"):
        zones(hist, "fp16", 1.5)


def test_scaler_pair_matches_gradscaler_through_infs():
    pair = amp.ScalerPair(init_scale=2.0**10, growth_interval=2)
    for ev in ["clean", "inf", "clean", "clean", "nan", "clean", "clean", "clean"]:
        pair.step(ev)
    assert pair.agree()
    assert pair.scales["course"] == [1024.0, 1024.0, 512.0, 512.0, 1024.0, 512.0, 512.0, 1024.0, 1024.0]
    assert "backed off" in amp.explain_step(_after(["inf"])) and "grew" in amp.explain_step(_after(["clean"] * 2))
    with pytest.raises(ValueError, match="unknown event"):
        pair.step("boom")


def _after(events):
    pair = amp.ScalerPair(init_scale=2.0**10, growth_interval=2)
    for ev in events:
        pair.step(ev)
    return pair


def test_explain_logit_grads_both_sides():
    below = amp.explain_logit_grads(8192, 32768, 0.9, [10.61, 10.68])
    assert "**below**" in below and "did not fall" in below and "2^4" in below
    above = amp.explain_logit_grads(256, 64, 0.0, [4.2, 3.4])
    assert "**above**" in above and "fell by 0.80" in above and "survive" in above
    rose = amp.explain_logit_grads(256, 64, None, [3.0, 4.0])
    assert "rose by 1.00" in rose
    with pytest.raises(ValueError):
        amp.typical_logit_grad(0, 64)


def test_explain_step_speed_both_ways():
    named = X.explain_step_speed({"fp32": 0.4, "bf16": 0.06}, "cuda", "NVIDIA H200")
    assert named.startswith("On this NVIDIA H200,") and "this cuda" not in named     # issue 41 item 9
    assert X.explain_step_speed({"fp32": 0.4, "bf16": 0.06}, "cuda").startswith("On this GPU,")
    fast = X.explain_step_speed({"fp32": 0.4, "bf16": 0.06, "tf32": 0.13}, "cuda")
    assert "6.67x faster than strict fp32" in fast and "noise" not in fast
    slow = X.explain_step_speed({"fp32": 0.016, "bf16": 0.020, "tf32": 0.013}, "cpu")
    assert "1.25x slower" in slow and "does not show why" in slow and "noise" in slow
    same = X.explain_step_speed({"fp32": 0.1, "bf16": 0.101}, "cpu")
    assert "about as fast as" in same and "does not show why" not in same
    with pytest.raises(ValueError, match="fp32"):
        X.explain_step_speed({"bf16": 0.1}, "cpu")


def test_explain_saved_bytes():
    half = X.explain_saved_bytes({"fp32": {"float32": 1000 * 2**20}, "bf16": {"bfloat16": 500 * 2**20}})
    assert "**0.50x**" in half and "not 0.5" not in half
    more = X.explain_saved_bytes({"fp32": {"float32": 1000 * 2**20},
                                  "bf16": {"bfloat16": 400 * 2**20, "float32": 210 * 2**20}})
    assert "**0.61x**" in more and "210.00 MiB (34%) stayed fp32" in more and "not 0.5" in more


# The H200 record of 2026-11-30 before the leak fix (git show 2b04dd6^:data/reference/h200/amp.json):
# each mode left its forward graph allocated, so the recorded peaks only rose.
LEAKY_H200_ROWS = [
    {"name": "fp32", "peak_mem_gib": 33.2495, "mem_after_gib": 15.6613, "saved_activation_gib": 14.3368},
    {"name": "tf32", "peak_mem_gib": 48.8369, "mem_after_gib": 31.2487, "saved_activation_gib": 14.3368},
    {"name": "bf16", "peak_mem_gib": 55.1437, "mem_after_gib": 42.1962, "saved_activation_gib": 8.4462},
    {"name": "fp16_scaler", "peak_mem_gib": 66.0906, "mem_after_gib": 53.1430, "saved_activation_gib": 8.4462},
    {"name": "fp16_noscale", "peak_mem_gib": 77.0374, "mem_after_gib": 64.0898, "saved_activation_gib": 8.4462},
]


def test_peak_memory_of_the_leaky_h200_record_is_corrected():
    rows = LEAKY_H200_ROWS
    step = X.step_peak_gib(rows)
    # recorded peaks rose with each mode; the per-step peaks do not, and 16-bit needs less than fp32
    peaks = [r["peak_mem_gib"] for r in rows]
    assert peaks == sorted(peaks)
    assert step["bf16"] < step["fp32"] and abs(step["tf32"] - step["fp32"]) < 0.5
    text = X.explain_peak_memory(rows)
    assert "leak" in text and "less than fp32" in text


def test_peak_memory_with_base_and_no_leak():
    rows = [{"name": "fp32", "peak_mem_gib": 20.0, "base_mem_gib": 1.0, "mem_after_gib": 0.1},
            {"name": "bf16", "peak_mem_gib": 26.0, "base_mem_gib": 1.0, "mem_after_gib": 0.1}]
    text = X.explain_peak_memory(rows)
    assert X.step_peak_gib(rows) == {"fp32": 19.0, "bf16": 25.0}
    assert "leak" not in text and "6 GiB more than fp32" in text


def _mb(peak, phase, **cats):
    from course_kit.profiling import memory as M
    names = {"w": M.WEIGHTS, "g": M.GRADS, "o": M.OPT_STATE, "c": M.CAST, "a": M.ACTIVATIONS}
    by = {names[k]: int(v * 2**30) for k, v in cats.items()}
    return {"memory_breakdown": {"peak_bytes": int(peak * 2**30), "peak_phase": phase, "by_category": by}}


def test_memory_breakdown_explained_both_ways():
    lower = [{"name": "fp32", **_mb(10, "backward", w=1, g=1, o=2, a=6)},
             {"name": "bf16", **_mb(7.5, "backward", w=1, g=1, o=2, c=0.5, a=3)}]
    text = X.explain_memory_breakdown(lower)
    assert "peak **10.00 GiB**" in text and "activations (saved for backward), 6.00 GiB (60%)" in text
    assert "2.5 GiB less than fp32" in text and "3.00 GiB against 6.00 GiB (0.50x)" in text
    assert "adds 0.50 GiB" in text and "did not lower" not in text
    higher = [{"name": "fp32", **_mb(5, "backward", w=1, g=1, o=2, a=1)},
              {"name": "bf16", **_mb(5.2, "forward", w=1, g=1, o=2, c=0.6, a=0.6)}]
    text = X.explain_memory_breakdown(higher)
    assert "0.2 GiB more than fp32" in text and "did not lower the peak" in text
    assert X.explain_memory_breakdown([{"name": "fp32"}]).startswith("This record has no memory snapshot")
