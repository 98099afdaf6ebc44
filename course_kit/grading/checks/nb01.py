"""Checks for notebook 01 (dtypes and overflow)."""
from __future__ import annotations

import torch

from course_kit import grading
from course_kit.grading.checks import feedback

# fp32 values where a bf16 rounding goes wrong in the usual ways: ties (to even, both
# directions), carries into the exponent, the top of the range, subnormals, signed zero, inf, NaN.
EDGE_BITS = [
    0x3F808000, 0x3F818000, 0x3F80FFFF, 0x3F808001, 0x3FFF8000, 0x3FFFFFFF, 0x7F7F7FFF,
    0x7F7F8000, 0x7F7FFFFF, 0x00000001, 0x00008000, 0x00018000, 0x007FFFFF, 0x80000000,
    0x00000000, 0x7F800000, 0xFF800000, 0xBF808000, 0xC0FF8000, 0xFF7F8000,
]


def from_bits(bits: list[int]) -> torch.Tensor:
    signed = [b - (1 << 32) if b >= 1 << 31 else b for b in bits]
    return torch.tensor(signed, dtype=torch.int32).view(torch.float32)


def _bf16_cases() -> list[tuple]:
    g = torch.Generator().manual_seed(101)
    x = torch.randn(4096, generator=g) * torch.exp2(torch.randint(-60, 60, (4096,), generator=g).float())
    return [(from_bits(EDGE_BITS),), (x,)]


def compare_bf16(fn, x: torch.Tensor, label: str) -> None:
    """fn(x) must equal torch's own fp32 -> bf16 -> fp32 cast, bit for bit (NaN: only 'is NaN')."""
    got = fn(x)
    want = x.to(torch.bfloat16).to(torch.float32)           # torch's own cast is the oracle
    feedback.tensor(got, want, f"round_to_bf16 on {label}", exact=True)
    same = (got.view(torch.int32) == want.view(torch.int32)) | (got.isnan() & want.isnan())
    if not bool(same.all()):
        i = int((~same).nonzero()[0])
        bits = x[i:i + 1].view(torch.int32).item() & 0xFFFFFFFF
        raise feedback.Wrong(f"round_to_bf16 on {label}: {int((~same).sum())} values have the wrong bits, "
                             f"e.g. the input with fp32 bits 0x{bits:08X} gives {got[i].item()!r}",
                             expected=want[i].item())


BF16_HINT = """View the fp32 bits as integers (`x.view(torch.int32)`, then work in int64 so the top
bit is not a sign). Round to nearest even: add 0x7FFF plus the lowest kept bit (bit 16), then clear
the low 16 bits. NaN needs its own case (keep it a NaN); signed zeros and infinities come out right
by themselves."""


@grading.exercise("01.bf16_round", cases=_bf16_cases, source=True, hint=BF16_HINT)
def bf16_round(fn, source: str = "") -> None:
    if "bfloat16" in source:
        raise feedback.Wrong("the solution uses torch.bfloat16: round with integer bit operations only")
    edge, rand = (c[0] for c in _bf16_cases())
    compare_bf16(fn, edge, "edge cases (ties, carries, subnormals, signed zero, inf, NaN)")
    compare_bf16(fn, rand, "random values")


# Cases of the prediction exercise; the expected answers come from torch, through the explorer.
OVERFLOW_CASES = [
    (70000.0, "fp16"), (70000.0, "bf16"), (65504.0, "fp16"), (1e-8, "fp16"), (1e-6, "fp16"),
    (0.001, "fp8_e4m3fn"), (460.0, "fp8_e4m3fn"), (1e5, "fp8_e5m2"), (300.0, "int8"),
    (3.0, "bf16"), (0.1, "fp32"), (1e39, "bf16"),
]

PREDICT_HINT = """Compare each value with the format's limits in the table of section 1: above the
largest finite value (plus half an ulp) a float overflows to inf, except e4m3fn, which has no inf
(NaN) and int8, which saturates; below the smallest normal it becomes subnormal, and below half the
smallest subnormal it flushes to zero. In range, it is exact only if it fits the mantissa bits."""


@grading.exercise("01.predict_overflow", hint=PREDICT_HINT)
def predict_overflow(predictions) -> None:
    from course_kit import dtypes
    grading.expect(isinstance(predictions, dict), "predictions", "a dict {(value, format): outcome}",
                   type(predictions).__name__)
    missing = [c for c in OVERFLOW_CASES if c not in predictions]
    if missing:
        raise feedback.Wrong(f"predictions: no prediction for {missing[0]} ({len(missing)} missing); "
                             f"keys are (value, format) tuples, outcomes one of {list(dtypes.OUTCOMES)}")
    wrong = [c for c in OVERFLOW_CASES if predictions[c] != dtypes.classify(*c).outcome]
    if wrong:
        raise feedback.Wrong(
            f"{len(wrong)} of {len(OVERFLOW_CASES)} predictions differ from what torch does, "
            f"e.g. {wrong[0]}: you predicted {predictions[wrong[0]]!r}",
            expected={c: dtypes.classify(*c).outcome for c in wrong})


MEMORY_HINT = """Per layer: q and o are hidden x hidden; k and v are hidden x (kv_heads x head_dim);
the MLP has three hidden x intermediate matrices; two RMSNorm vectors. Add two embeddings
(vocab x hidden, untied) and the final norm. Mixed-precision Adam keeps 16 bytes per parameter
(bf16 weights and grads, fp32 master copy and two moments). The KV cache stores K and V, per layer,
per KV head, per token, per sequence, 2 bytes each."""


@grading.exercise("01.memory", hint=MEMORY_HINT)
def model_memory(n_params, weights_gb, adam_gb, kv_gb) -> None:
    from course_kit import memory
    shape = memory.PRESETS["8b"]
    n = shape.n_params()
    if isinstance(n_params, bool) or not isinstance(n_params, (int, float)) or n_params != n:
        what = "not a number" if not isinstance(n_params, (int, float)) else f"{n_params:,.0f}"
        raise feedback.Wrong(f"n_params: {what} is not the exact parameter count "
                             "(count every matrix, both embeddings and every norm)", expected=n)
    feedback.number(weights_gb, memory.weights_bytes(n, "bf16") / 1e9, "weights_gb (bf16)", rel=2e-3)
    feedback.number(adam_gb, sum(memory.training_bytes(n, "adam", mixed=True).values()) / 1e9,
                    "adam_gb (mixed precision: weights, grads, master copy, moments)", rel=2e-3)
    feedback.number(kv_gb, memory.kv_cache_bytes(shape.layers, shape.kv_heads, shape.head_dim, 8192, 4) / 1e9,
                    "kv_gb (bf16, 8192 tokens, batch 4)", rel=2e-3)
