"""Checks for notebook 01 (dtypes and overflow)."""
from __future__ import annotations

import inspect
import math

import torch

from course_kit import grading

# fp32 values where a bf16 rounding goes wrong in the usual ways: ties (to even, both
# directions), carries into the exponent, the top of the range, subnormals, signed zero, inf, NaN.
_EDGE_BITS = [
    0x3F808000, 0x3F818000, 0x3F80FFFF, 0x3F808001, 0x3FFF8000, 0x3FFFFFFF, 0x7F7F7FFF,
    0x7F7F8000, 0x7F7FFFFF, 0x00000001, 0x00008000, 0x00018000, 0x007FFFFF, 0x80000000,
    0x00000000, 0x7F800000, 0xFF800000, 0xBF808000, 0xC0FF8000, 0xFF7F8000,
]


def _from_bits(bits: list[int]) -> torch.Tensor:
    signed = [b - (1 << 32) if b >= 1 << 31 else b for b in bits]
    return torch.tensor(signed, dtype=torch.int32).view(torch.float32)


def _compare_bf16(fn, x: torch.Tensor, label: str) -> None:
    got = fn(x.clone())
    grading.expect(isinstance(got, torch.Tensor) and got.shape == x.shape,
                   f"round_to_bf16 on {label}", f"a tensor of shape {tuple(x.shape)}",
                   type(got).__name__ if not isinstance(got, torch.Tensor) else tuple(got.shape))
    got = got.to(torch.float32)
    want = x.to(torch.bfloat16).to(torch.float32)           # torch's own cast is the oracle
    nan_ok = torch.equal(got.isnan(), want.isnan())
    same = (got.view(torch.int32) == want.view(torch.int32)) | (got.isnan() & want.isnan())
    if not (nan_ok and bool(same.all())):
        i = int((~same).nonzero()[0])
        grading.expect(False, f"round_to_bf16({x[i].item()!r}) [fp32 bits "
                       f"0x{x[i:i + 1].view(torch.int32).item() & 0xFFFFFFFF:08X}] on {label}",
                       want[i].item(), got[i].item())


@grading.exercise("01.bf16_round")
def bf16_round(fn) -> None:
    grading.expect(callable(fn), "round_to_bf16", "a function", type(fn).__name__)
    try:
        src = inspect.getsource(fn)
    except (OSError, TypeError):
        src = ""
    grading.expect("bfloat16" not in src, "the solution's source",
                   "integer bit operations only (no torch.bfloat16 cast)", "uses torch.bfloat16")
    _compare_bf16(fn, _from_bits(_EDGE_BITS), "edge cases")
    g = torch.Generator().manual_seed(101)
    x = torch.randn(4096, generator=g) * torch.exp2(torch.randint(-60, 60, (4096,), generator=g)
                                                    .float())
    _compare_bf16(fn, x, "random values")


@grading.exercise("01.bf16_round_hidden")
def bf16_round_hidden(fn) -> None:
    g = torch.Generator().manual_seed(202)
    bits = torch.randint(0, 2 ** 31 - 1, (20000,), generator=g, dtype=torch.int64)
    sign = torch.randint(0, 2, (20000,), generator=g, dtype=torch.int64) << 31
    x = _from_bits(((bits | sign) & 0xFFFFFFFF).tolist())
    x = x[~torch.isnan(x)]                 # random NaN payloads: only "is NaN" is meaningful
    _compare_bf16(fn, x, "random bit patterns")


# Cases of the prediction exercise; the expected answers come from torch, through the explorer.
OVERFLOW_CASES = [
    (70000.0, "fp16"), (70000.0, "bf16"), (65504.0, "fp16"), (1e-8, "fp16"), (1e-6, "fp16"),
    (0.001, "fp8_e4m3fn"), (460.0, "fp8_e4m3fn"), (1e5, "fp8_e5m2"), (300.0, "int8"),
    (3.0, "bf16"), (0.1, "fp32"), (1e39, "bf16"),
]


@grading.exercise("01.predict_overflow")
def predict_overflow(predictions) -> None:
    from course_kit import dtypes
    grading.expect(isinstance(predictions, dict), "predictions",
                   "a dict {(value, format): outcome}", type(predictions).__name__)
    wrong = []
    for case in OVERFLOW_CASES:
        grading.expect(case in predictions, f"a prediction for {case}", "one of "
                       f"{list(dtypes.OUTCOMES)}", "missing")
        actual = dtypes.classify(*case)
        if predictions[case] != actual.outcome:
            wrong.append(f"{case}: expected {actual.outcome!r} (stored {actual.stored:.6g}), "
                         f"found {predictions[case]!r}")
    assert not wrong, "Some predictions differ from what torch does:\n  " + "\n  ".join(wrong)


# Llama-3.1-8B's config.json values, as given in the exercise text.
LLAMA_8B = dict(layers=32, hidden=4096, heads=32, kv_heads=8, intermediate=14336, vocab=128256)


@grading.exercise("01.memory")
def model_memory(n_params, weights_gb, adam_gb, kv_gb) -> None:
    from course_kit import memory
    shape = memory.PRESETS["8b"]
    n = shape.n_params()
    expected = {
        "n_params": n,
        "weights_gb (bf16)": memory.weights_bytes(n, "bf16") / 1e9,
        "adam_gb (mixed precision: weights, grads, master, moments)":
            sum(memory.training_bytes(n, "adam", mixed=True).values()) / 1e9,
        "kv_gb (bf16, 8192 tokens, batch 4)":
            memory.kv_cache_bytes(shape.layers, shape.kv_heads, shape.head_dim, 8192, 4) / 1e9,
    }
    for (what, want), got in zip(expected.items(), (n_params, weights_gb, adam_gb, kv_gb)):
        ok = isinstance(got, (int, float)) and math.isclose(got, want, rel_tol=0.01)
        grading.expect(ok, what, f"{want:,.4g}", got)
