"""Checks for notebook 01 (dtypes and overflow).

- 01.fp8_round: implement round-to-nearest-even fp32 -> fp8 e4m3fn (not shown in the notebook);
  the oracle is torch's own cast, bit for bit, on ties, subnormals, saturation, signed zero, NaN.
- 01.predict_overflow: predict the outcome of storing values that no table above shows; the right
  outcomes are the instructor's answer key (instructor/hidden_checks/nb01.py).
- 01.overflow_point: predict, then measure, the smallest fp16 x at which an attention-score chain
  gives inf or NaN, with the scaling after or before the matmul; then say which op overflowed. The
  points are checked by what they must be (the chain overflows at x, not at the fp16 value below).
- 01.memory: Qwen2.5-7B's parameters (with its q/k/v biases), weights, Adam state and KV cache, in
  GiB. The weights and Adam state are checked against the learner's own count, the count and the
  KV cache against the instructor's answer key.
"""
from __future__ import annotations

import math

import torch

from course_kit import grading
from course_kit.dtypes import fp8_overflow
from course_kit.grading.checks import feedback, registry

# ---- 01.fp8_round -------------------------------------------------------------------------------

# fp32 values where an e4m3fn rounding goes wrong in the usual ways: ties to even (both directions),
# carries into the exponent, the top of the range (448, the tie at 464, saturation beyond it and at
# inf), subnormals and their ties (half the smallest subnormal goes to zero), signed zero, NaN.
FP8_EDGES = [
    1.0625, 1.1875, -1.0625, -1.1875, 1.9375, 15.5, 0.1, 3.0, 240.0, 250.0, 448.0, 456.0, 464.0,
    464.00003, 465.0, 479.0, 1e4, -1e4, math.inf, -math.inf, 2.0 ** -6, 2.0 ** -9, 2.0 ** -10,
    3 * 2.0 ** -10, 5 * 2.0 ** -10, 2.0 ** -11, 0.9 * 2.0 ** -10, 7.5 * 2.0 ** -9, 6.5 * 2.0 ** -9,
    -3 * 2.0 ** -10, -(2.0 ** -12), 1e-30, 0.0, -0.0, math.nan, 2.0 ** -7 * 1.0625,
]


def from_bits(bits: list[int]) -> torch.Tensor:
    signed = [b - (1 << 32) if b >= 1 << 31 else b for b in bits]
    return torch.tensor(signed, dtype=torch.int32).view(torch.float32)


def fp8_cases() -> list[tuple]:
    g = torch.Generator().manual_seed(101)
    x = torch.randn(4096, generator=g) * torch.exp2(torch.randint(-14, 10, (4096,), generator=g).float())
    return [(torch.tensor(FP8_EDGES, dtype=torch.float32),), (x,)]


def compare_fp8(fn, x: torch.Tensor, label: str) -> None:
    """fn(x) must equal torch's own fp32 -> e4m3fn -> fp32 cast, bit for bit (NaN: only 'is NaN').
    The oracle is the running torch's cast, so beyond 448 it is right on either behaviour (saturate
    or NaN, see dtypes/fp8_overflow.py); the tests swap in the other behaviour through it."""
    got = fn(x)
    want = fp8_overflow.torch_e4m3(x)                          # torch's own cast is the oracle
    feedback.tensor(got, want, f"round_to_e4m3 on {label}", exact=True)
    same = (got.view(torch.int32) == want.view(torch.int32)) | (got.isnan() & want.isnan())
    if not bool(same.all()):
        i = int((~same).nonzero()[0])
        raise feedback.Wrong(f"round_to_e4m3 on {label}: {int((~same).sum())} values have the wrong bits, "
                             f"e.g. the input {x[i].item()!r} gives {got[i].item()!r}", expected=want[i].item())


FP8_HINT = """Split |x| into 2^e x m with e = floor(log2|x|) (torch.frexp does it exactly), but never let
e go below e4m3fn's smallest normal exponent (-6): below it the grid spacing stays 2^-9 (subnormals).
With 3 mantissa bits the spacing at exponent e is 2^(e-3): divide by it, round half to even
(torch.round does), multiply back. Then the top: past 448, this torch either saturates or gives NaN
(section 2 printed which; fp8_overflow.saturates() says so in code). Keep the sign (also of zero) and NaN."""


@grading.exercise("01.fp8_round", cases=fp8_cases, source=True, hint=FP8_HINT)
def fp8_round(fn, source: str = "") -> None:
    if "float8" in source:
        raise feedback.Wrong("the solution uses a torch float8 dtype: round with arithmetic on the values or bits")
    edge, rand = (c[0] for c in fp8_cases())
    compare_fp8(fn, edge, "edge cases (ties, carries, the top of the range, subnormals, signed zero, NaN)")
    compare_fp8(fn, rand, "random values")


# ---- 01.predict_overflow ------------------------------------------------------------------------

# None of these (value, format) pairs is shown above the exercise (edge-case table, explorer,
# e4m3fn beyond-448 list): the expected answers come from torch, through dtypes.classify.
OVERFLOW_CASES = [
    (65519.0, "fp16"), (65536.0, "fp16"), (3e-8, "fp16"), (2.9e-8, "fp16"), (240.0, "fp8_e4m3fn"),
    (250.0, "fp8_e4m3fn"), (0.0009, "fp8_e4m3fn"), (0.001, "fp8_e5m2"), (127.5, "int8"), (8.0, "int4"),
    (16777217.0, "fp32"), (1e-46, "fp32"),
]

PREDICT_HINT = """Compare each value with the format's limits in the table of section 1. A float
overflows only beyond its max plus half an ulp (below that it rounds to the max); below half the
smallest subnormal it flushes to zero, between that and the smallest subnormal it rounds up to it.
Integers round half to even, then saturate. In range, a value is exact only if its significant bits
fit the mantissa."""


@grading.exercise("01.predict_overflow", hint=PREDICT_HINT, keyed="the outcomes")
def predict_overflow(predictions) -> None:
    from course_kit import dtypes
    grading.expect(isinstance(predictions, dict), "predictions: expected a dict {(value, format): outcome}",
                   "a dict", feedback.describe(predictions))
    missing = [c for c in OVERFLOW_CASES if c not in predictions]
    if missing:
        raise feedback.Wrong(f"predictions: no prediction for {missing[0]} ({len(missing)} missing); "
                             f"keys are (value, format) tuples, outcomes one of {list(dtypes.OUTCOMES)}")
    unknown = [c for c in OVERFLOW_CASES if predictions[c] not in dtypes.OUTCOMES]
    if unknown:
        raise feedback.Wrong(f"predictions[{unknown[0]}]: {str(predictions[unknown[0]])[:40]!r} is not one of "
                             f"{list(dtypes.OUTCOMES)}")
    key = registry.key("01.predict_overflow")
    if key is None:
        return
    right = dict(zip(OVERFLOW_CASES, key["outcomes"]))
    wrong = [c for c in OVERFLOW_CASES if predictions[c] != right[c]]
    if wrong:
        raise feedback.Wrong(
            f"{len(wrong)} of {len(OVERFLOW_CASES)} predictions differ from what torch does: "
            + ", ".join(f"{c} (you predicted {predictions[c]!r})" for c in wrong),
            expected={c: right[c] for c in wrong})


# ---- 01.overflow_point --------------------------------------------------------------------------

HEAD_DIM = 64


def scores_chain(x: torch.Tensor, prescale: bool) -> torch.Tensor:
    """For each fp16 value in x: softmax of the scores of q = k = a 4 x 64 matrix filled with it,
    scaled by 1/sqrt(64) after the matmul (prescale=False) or on q before it (prescale=True)."""
    q = x.to(torch.float16)[:, None, None].expand(-1, 4, HEAD_DIM).contiguous()
    k = q.transpose(1, 2)
    s = (q / math.sqrt(HEAD_DIM)) @ k if prescale else (q @ k) / math.sqrt(HEAD_DIM)
    return torch.softmax(s, -1)


CULPRITS = "ABCD"   # which one is right only the hidden checker knows (instructor/hidden_checks/nb01.py)

OVERFLOW_POINT_HINT = """Measure: build q as torch.full((4, 64), x, dtype=torch.float16) and run the
chain for many x, e.g. every fp16 value (torch.arange over the int16 bit patterns, .view(torch.float16)),
then take the first x whose output is not all finite. To explain, print the intermediate results
just below and at that x: which one is the first inf? (torch.softmax subtracts each row's max.)"""


def _fp16_value(found, what: str) -> float:
    if isinstance(found, bool) or not isinstance(found, (int, float)):
        raise grading.Wrong(f"{what}: expected a number, found {feedback.describe(found)}")
    if not math.isfinite(found) or found <= 0 or float(torch.tensor(found, dtype=torch.float16)) != found:
        raise grading.Wrong(f"{what}: {found!r} is not a positive finite fp16 value")
    return float(found)


def _fp16_below(x: float) -> float:
    """The fp16 value just below a positive fp16 x."""
    bits = torch.tensor([x], dtype=torch.float16).view(torch.int16)
    return float((bits - 1).view(torch.float16))


@grading.exercise("01.overflow_point", hint=OVERFLOW_POINT_HINT, later="CULPRIT")
def overflow_point(prediction, x_after, x_before, culprit) -> None:
    """prediction: {"after": number, "before": number} recorded before measuring (not graded);
    x_after, x_before: the measured overflow points; culprit: a letter. A point is right when the
    chain overflows there and not at the fp16 value just below it."""
    wrong = feedback.Fields()
    with wrong.field():
        if not (isinstance(prediction, dict) and {"after", "before"} <= set(prediction)):
            raise grading.Wrong("PREDICTION must be recorded before measuring: a dict with keys 'after' and "
                                f"'before', found {feedback.describe(prediction)}")
    for name, found in (("after", x_after), ("before", x_before)):
        with wrong.field():
            what = f"X_{name.upper()} (scaling {name} the matmul)"
            x = _fp16_value(found, what)
            if bool(torch.isfinite(scores_chain(torch.tensor([x]), name == "before")).all()):
                raise grading.Wrong(f"{what}: the chain's output at x = {x:g} is still finite")
            below = _fp16_below(x)
            if below > 0 and not bool(torch.isfinite(scores_chain(torch.tensor([below]), name == "before")).all()):
                raise grading.Wrong(f"{what}: a smaller fp16 x already gives inf or NaN")
    with wrong.field():
        feedback.choice(culprit, "CULPRIT", CULPRITS)
    wrong.done()


# ---- 01.memory ----------------------------------------------------------------------------------

# Qwen2.5-7B's published config.json: not among memory.PRESETS, so the memory estimator above cannot
# show its numbers. Its q, k and v projections have biases; o and the MLP do not.
QWEN = {"name": "Qwen2.5-7B", "layers": 28, "hidden": 3584, "heads": 28, "kv_heads": 4,
        "intermediate": 18944, "vocab": 152064}
KV_SEQ, KV_BATCH = 32768, 4


MEMORY_HINT = """Per layer: q and o are hidden x hidden; k and v are hidden x (kv_heads x head_dim),
head_dim = hidden / heads; q, k and v each have a bias vector of their output size; the MLP has three
hidden x intermediate matrices; two RMSNorm vectors. Add two embeddings (vocab x hidden, untied) and
the final norm. Mixed-precision Adam keeps 16 bytes per parameter. The KV cache stores K and V, per
layer, per KV head, per token, per sequence, 2 bytes each in bf16. A GiB is 2**30 bytes, not 1e9."""


def _positive(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise feedback.Wrong(f"{what}: expected a positive number, found {feedback.describe(value)}")
    if not math.isfinite(value) or value <= 0:
        raise feedback.Wrong(f"{what}: expected a positive number, found {value!r}")
    return float(value)


@grading.exercise("01.memory", hint=MEMORY_HINT, keyed="n_params and kv_gib")
def model_memory(n_params, weights_gib, adam_gib, kv_gib) -> None:
    """weights_gib and adam_gib must follow from the learner's own n_params (bf16, mixed-precision
    Adam); n_params and kv_gib are compared with the instructor's answer key."""
    from course_kit.dtypes import memory
    wrong = feedback.Fields()
    n = None
    with wrong.field():
        if isinstance(n_params, bool) or not isinstance(n_params, int) or n_params <= 0:
            raise feedback.Wrong(f"n_params: expected a positive int, found {feedback.describe(n_params)}")
        n = n_params
    gib = memory.GiB
    if n is not None:
        with wrong.field():
            feedback.number(weights_gib, memory.weights_bytes(n, "bf16") / gib,
                            "weights_gib (bf16, in GiB, for your n_params)", rel=2e-3)
        with wrong.field():
            feedback.number(adam_gib, sum(memory.training_bytes(n, "adam", mixed=True).values()) / gib,
                            "adam_gib (mixed precision: weights, grads, master copy, moments, in GiB, for your "
                            "n_params)", rel=2e-3)
    with wrong.field():
        _positive(kv_gib, "kv_gib")
    wrong.done()
    key = registry.key("01.memory")
    if key is None:
        return
    with wrong.field():
        if n_params != key["n_params"]:
            raise feedback.Wrong(f"n_params: {n_params:,} is not the exact parameter count (count every matrix, "
                                 "every bias, both embeddings and every norm)", expected=key["n_params"])
    with wrong.field():
        feedback.number(kv_gib, key["kv_gib"], f"kv_gib (bf16, {KV_SEQ} tokens, batch {KV_BATCH}, in GiB)", rel=2e-3)
    wrong.done()
